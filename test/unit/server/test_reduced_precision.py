"""A policy served in bfloat16 (the server's ``dtype``) through the real request path, no ROS
graph.

The weights, the preprocessed inputs and the forward are in the served dtype
(LeRobot's device step casts the inputs; autocast covers what LeRobot's ACT
creates in float32 itself); the chunk leaves in float32 and stays close to the
float32 policy's. Measured here: the largest difference 0.005 in robot units
against values up to 0.85 (bfloat16 keeps 8 bits of mantissa); the bound is 0.05.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire.data_plane import chunk_from_msg
from support.request_harness import Harness

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_reduced_precision")

BFLOAT16_BOUND = 0.05


@pytest.fixture(scope="module")
def bfloat16_runner(act_checkpoint):
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner

    return PolicyRunner(load_policy(str(act_checkpoint), device="cpu", dtype="bfloat16"))


def test_a_bfloat16_policy_gets_bfloat16_inputs_and_answers_close_to_float32(
    bfloat16_runner, runner, monkeypatch
):
    policy = bfloat16_runner.loaded.policy
    assert {parameter.dtype for parameter in policy.parameters()} == {torch.bfloat16}
    seen = []
    forward = policy.predict_action_chunk

    def recording_forward(batch, **kwargs):
        seen.append(
            {key: value.dtype for key, value in batch.items() if isinstance(value, torch.Tensor)}
        )
        return forward(batch, **kwargs)

    monkeypatch.setattr(policy, "predict_action_chunk", recording_forward)
    rng = np.random.default_rng(5)
    state, frame = rng.uniform(-1, 1, 6), rng.integers(0, 255, (96, 128, 3), np.uint8)
    chunks = []
    for served in (bfloat16_runner, runner):
        harness = Harness(served)
        harness.send(harness.observation(seq=1, state=state, frame=frame))
        chunks.append(chunk_from_msg(harness.published[-1][1]))
    low, full = chunks
    assert low.status == ActionChunk.STATUS_OK, low.error
    assert seen and set(seen[0].values()) == {torch.bfloat16}, f"the forward got {seen[0]}"
    assert low.actions_robot.dtype == np.float32 and np.isfinite(low.actions_robot).all()
    difference = float(np.abs(low.actions_robot - full.actions_robot).max())
    assert difference <= BFLOAT16_BOUND, f"bfloat16 differs from float32 by {difference}"
    assert not np.array_equal(low.actions_robot, full.actions_robot), (
        "the bfloat16 policy ran in float32"
    )
