"""One request's observation as it goes on the wire, built in one place (pending_request.py)."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.executor.control.action_queue import QueueSnapshot
from lerobot_ros.executor.requests.observation_assembly import ObservationAssembler
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import RequestId, observation_to_msg
from support.executor_harness import CAMERA, JOINTS


def assembled(frame):
    holder = ObservationAssembler(JOINTS, (CAMERA,), False, max_age_s=0.5)
    holder.on_joint_state(["a", "b", "c"], [1.0, 2.0, 3.0], [], now_s=1.0)
    holder.on_camera(CAMERA, frame, now_s=1.0)
    return holder.assemble(1.0)


def pending(rtc: bool, frame=None, camera_sizes=None) -> PendingRequest:
    prefix = np.ones((4, 3), np.float32)
    frame = images.rgb_to_raw(np.zeros((8, 8, 3), np.uint8)) if frame is None else frame
    return PendingRequest(
        RequestId("s1", "arm", 7, 2, 1, 123),
        assembled(frame),
        QueueSnapshot(0, prefix, prefix * 2),
        3 if rtc else 0,
        rtc,
        "pick",
        jpeg_quality=90,
        camera_sizes=camera_sizes,
    )


def test_observation_message_carries_ids_state_cameras_and_prefix():
    msg = observation_to_msg(pending(rtc=True).outgoing())
    assert (msg.session_id, msg.seq, msg.episode, msg.epoch, msg.sent_monotonic_ns) == (
        "s1",
        7,
        2,
        1,
        123,
    )
    assert list(msg.state) == [1.0, 2.0, 3.0] and list(msg.compressed_camera_names) == [CAMERA]
    assert (msg.inference_delay_steps, msg.prefix_steps, len(msg.prefix_model)) == (3, 4, 12)
    assert msg.task == "pick"
    assert list(msg.prefix_robot) == pytest.approx([2.0] * 12)


def test_the_prefix_goes_out_only_with_rtc():
    outgoing = pending(rtc=False).outgoing()
    assert outgoing.prefix_model is None and outgoing.prefix_robot is None
    assert observation_to_msg(outgoing).prefix_steps == 0


def test_frames_larger_than_the_policy_are_shrunk_to_its_size():
    large = images.rgb_to_raw(np.zeros((16, 16, 3), np.uint8))
    sized = pending(rtc=False, frame=large, camera_sizes={CAMERA: (8, 8)})
    shrunk = images.compressed_to_rgb(sized.outgoing().compressed[CAMERA])
    kept = images.compressed_to_rgb(pending(rtc=False, frame=large).outgoing().compressed[CAMERA])
    assert shrunk.shape == (8, 8, 3) and kept.shape == (16, 16, 3)


def test_an_unusable_frame_raises_when_the_observation_is_built():
    broken = images.rgb_to_raw(np.zeros((8, 8, 3), np.uint8))
    broken.data = b"\x00"  # one byte for an 8x8 rgb8 image
    with pytest.raises(images.ImageError):
        pending(rtc=False, frame=broken).outgoing()
