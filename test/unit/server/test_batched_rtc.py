"""Batched RTC guidance (server/batched_rtc.py) against LeRobot 0.6.1's own RTCProcessor.

At batch 1 the per-sample form equals LeRobot's scalar form; in a batch, each
row equals LeRobot's processor run on that row alone (a row without a prefix
equals LeRobot's unguided step). Checked on a small nonlinear denoiser for
every prefix-attention schedule, and on the tiny SmolVLA policy end to end.
"""

from __future__ import annotations

import pytest
import torch
from lerobot.configs import RTCAttentionSchedule
from lerobot.policies.rtc import RTCConfig
from lerobot.policies.rtc.modeling_rtc import RTCProcessor

from lerobot_ros.protocol.contract import SCHEMA_VERSION
from lerobot_ros.server.policy import batched_rtc
from lerobot_ros.server.policy.batched_rtc import (
    BatchedRTCProcessor,
    SamplePrefix,
    batched_rtc_kwargs,
)

CHUNK, DIM, HORIZON = 20, 6, 8


def _denoiser():
    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(DIM, DIM, generator=generator)
    bias = torch.randn(CHUNK, DIM, generator=generator)
    return lambda x_t: torch.tanh(x_t @ weight) + bias


def _processors(schedule):
    config = RTCConfig(enabled=True, execution_horizon=HORIZON, prefix_attention_schedule=schedule)
    return RTCProcessor(config), BatchedRTCProcessor(config)


# (prefix steps, delay): longer and shorter than the horizon, delay past the horizon, delay 0, no
# prefix.
SAMPLES = [(12, 3), (4, 2), (9, 10), (6, 0), (0, 5)]


@pytest.mark.parametrize("schedule", list(RTCAttentionSchedule), ids=lambda s: s.value)
@pytest.mark.parametrize("time", [1.0, 0.7, 0.3, 0.1])
def test_each_row_of_a_batch_equals_lerobots_processor_on_that_row_alone(schedule, time):
    lerobot, ours = _processors(schedule)
    denoise = _denoiser()
    generator = torch.Generator().manual_seed(1)
    x_t = torch.randn(len(SAMPLES), CHUNK, DIM, generator=generator)
    prefixes = [
        torch.randn(steps, DIM, generator=generator) if steps else None for steps, _ in SAMPLES
    ]
    samples = [
        SamplePrefix(prefix, delay) for prefix, (_, delay) in zip(prefixes, SAMPLES, strict=False)
    ]
    kwargs = batched_rtc_kwargs(samples, HORIZON, "cpu", torch.float32)
    batched = ours.denoise_step(
        x_t,
        kwargs["prev_chunk_left_over"],
        kwargs["inference_delay"],
        time,
        denoise,
        kwargs["execution_horizon"],
    )
    for row, (prefix, (_, delay)) in enumerate(zip(prefixes, SAMPLES, strict=False)):
        alone = lerobot.denoise_step(x_t[row : row + 1], prefix, delay, time, denoise)
        assert torch.allclose(batched[row : row + 1], alone, atol=1e-6, rtol=0), (
            row,
            (batched[row] - alone[0]).abs().max(),
        )


@pytest.mark.parametrize(("steps", "delay"), [(12, 3), (4, 2), (9, 10)])
def test_the_per_sample_form_at_batch_one_equals_lerobots_scalar_form(steps, delay):
    lerobot, ours = _processors(RTCAttentionSchedule.LINEAR)
    denoise = _denoiser()
    generator = torch.Generator().manual_seed(2)
    x_t, prefix = (
        torch.randn(1, CHUNK, DIM, generator=generator),
        torch.randn(steps, DIM, generator=generator),
    )
    expected = lerobot.denoise_step(x_t, prefix, delay, 0.5, denoise)
    per_sample = ours.denoise_step(
        x_t, prefix[None], (delay,), 0.5, denoise, (min(HORIZON, steps),)
    )
    scalar = ours.denoise_step(x_t, prefix, delay, 0.5, denoise)
    assert torch.equal(scalar, expected), "given a scalar delay it is LeRobot's processor"
    assert torch.allclose(per_sample, expected, atol=1e-7, rtol=0)


def test_mismatched_per_sample_inputs_are_refused_with_the_sizes():
    _, ours = _processors(RTCAttentionSchedule.LINEAR)
    with pytest.raises(ValueError, match="batch size 2: 1 delays, 2 horizons, 2 prefixes"):
        ours.denoise_step(
            torch.zeros(2, CHUNK, DIM), torch.zeros(2, 3, DIM), (1,), 0.5, _denoiser(), (3, 3)
        )


def test_smolvla_with_the_batched_processor_equals_lerobots_processor_at_batch_one(
    smolvla_checkpoint,
):
    import numpy as np

    from lerobot_ros.protocol.wire.data_plane import ObservationFrame, RequestId
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner
    from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA

    runner = PolicyRunner(
        load_policy(str(smolvla_checkpoint), device="cpu"),
        rtc_enabled=True,
        rtc_execution_horizon=10,
    )
    policy = runner.loaded.policy
    assert isinstance(policy.model.rtc_processor, BatchedRTCProcessor), (
        "the runner installs the batched processor"
    )
    rng = np.random.default_rng(5)
    frame = ObservationFrame(
        request=RequestId("session", "arm", 1, 0, 0, 0),
        schema_version=SCHEMA_VERSION,
        task="pick up the cube",
        state=rng.uniform(-1, 1, 6).astype(np.float32),
        images={FRONT_CAMERA: rng.integers(0, 255, (*DEFAULT_IMAGE_SHAPE, 3), np.uint8)},
        inference_delay_steps=3,
        prefix_model=None,
        prefix_robot=None,
    )
    batch = runner.new_session_processors().preprocessor(runner._policy_input(frame, frame.task))
    prefix = torch.from_numpy(rng.normal(size=(7, 6)).astype(np.float32))
    noise = torch.from_numpy(
        rng.normal(size=(1, 50, policy.config.max_action_dim)).astype(np.float32)
    )

    per_sample = batched_rtc_kwargs(
        [SamplePrefix(prefix, 3), SamplePrefix(None, 0)], 10, "cpu", torch.float32
    )
    per_sample = {
        key: value[:1] for key, value in per_sample.items()
    }  # the first sample's row, still per-sample form
    ours = policy.predict_action_chunk(dict(batch), noise=noise.clone(), **per_sample)

    policy.init_rtc_processor()  # LeRobot's own processor back in place
    assert type(policy.model.rtc_processor) is RTCProcessor
    theirs = policy.predict_action_chunk(
        dict(batch), noise=noise.clone(), inference_delay=3, prev_chunk_left_over=prefix
    )
    batched_rtc.install(policy)
    assert torch.allclose(ours, theirs, atol=1e-6, rtol=0), (ours - theirs).abs().max()
    assert (ours[0, :3] - prefix[:3]).abs().mean() < 0.05, (
        "the guidance really held the delayed steps"
    )
