"""Camera frames reach the policy as LeRobot's own path feeds them: contiguous channels-first
float32 in [0, 1]."""

from __future__ import annotations

import numpy as np
import torch

from lerobot_ros.protocol.contract import SCHEMA_VERSION
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import ObservationFrame, RequestId
from lerobot_ros.server.policy.checkpoint import load_policy
from lerobot_ros.server.policy.inference import PolicyRunner
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA


def _frame(rgb: np.ndarray) -> ObservationFrame:
    return ObservationFrame(
        request=RequestId("session", "arm", 1, 0, 0, 0),
        schema_version=SCHEMA_VERSION,
        task="",
        state=np.zeros(6, np.float32),
        images={FRONT_CAMERA: rgb},
    )


def test_frames_become_contiguous_channels_first_tensors_with_the_same_pixels_at_the_trained_size(
    act_checkpoint,
):
    runner = PolicyRunner(
        load_policy(str(act_checkpoint), device="cpu"), rtc_enabled=False, rtc_execution_horizon=10
    )
    height, width = DEFAULT_IMAGE_SHAPE[:2]
    rng = np.random.default_rng(3)
    # As the data plane hands them over: a read-only view of a raw message, and a larger frame to
    # shrink.
    own = images.raw_to_rgb(images.rgb_to_raw(rng.integers(0, 256, (height, width, 3), np.uint8)))
    larger = rng.integers(0, 256, (2 * height, 2 * width, 3), np.uint8)
    for rgb, expected in ((own, own), (larger, images.resize_rgb(larger, height, width))):
        tensor = runner._policy_input(_frame(rgb), "")[FRONT_CAMERA]
        # Channels-last strides made LeRobot's normalizer and the forward slower (inference.py).
        assert (
            tensor.is_contiguous()
            and tensor.dtype == torch.float32
            and tuple(tensor.shape) == (3, height, width)
        )
        assert torch.equal(
            tensor, torch.from_numpy(expected.transpose(2, 0, 1).astype(np.float32) / 255.0)
        )
