"""Real-time chunking guidance for a batch of requests, each with its own delay and prefix.

LeRobot 0.6.1's ``RTCProcessor.denoise_step`` takes one scalar
``inference_delay`` and one prefix for the whole batch. Robots sharing a
forward pass each have their own measured delay and their own unexecuted
prefix (of any length, or none). ``BatchedRTCProcessor`` extends LeRobot's
processor by exactly that: given per-sample delays and horizons (sequences),
it builds one prefix-weight row per sample with LeRobot's own
``get_prefix_weights`` and applies LeRobot's guidance step with those rows.
Given a scalar delay it is LeRobot's processor unchanged.

Invariants: a sample's guided velocity depends only on its own ``x_t``,
prefix, delay and horizon (the weights are per row, the guidance weight a
function of time alone), so a request's chunk does not depend on who shared
its batch; a sample without a prefix has horizon 0, all-zero weights and
therefore exactly no correction (it is unguided); at batch 1 the result
equals LeRobot's processor (``test/unit/server/test_batched_rtc.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from lerobot.policies.rtc.modeling_rtc import RTCProcessor


@dataclass(frozen=True)
class SamplePrefix:
    """One request's RTC inputs: its prefix in model space ([steps, action_dim]) and delay, or no
    prefix."""

    prefix: torch.Tensor | None
    inference_delay: int


def batched_rtc_kwargs(
    samples: Sequence[SamplePrefix], execution_horizon: int, device, dtype
) -> dict:
    """``predict_action_chunk`` keyword arguments for a batch of RTC requests.

    One sample gets LeRobot's scalar form. Otherwise prefixes are right-padded with zeros to the
    longest one; each sample's horizon is its own prefix length capped to ``execution_horizon``
    (what LeRobot's processor does for a single prefix), 0 without a prefix, so the padding always
    gets weight 0. With no prefix in the batch, the call is LeRobot's unguided one.
    """
    if len(samples) == 1:  # LeRobot's own call: a scalar delay, the prefix as it is
        prefix = samples[0].prefix
        return {
            "inference_delay": samples[0].inference_delay,
            "prev_chunk_left_over": None if prefix is None else prefix.to(device, dtype),
        }
    present = [sample.prefix for sample in samples if sample.prefix is not None]
    if not present:
        return {"inference_delay": 0, "prev_chunk_left_over": None}
    longest = max(prefix.shape[0] for prefix in present)
    action_dim = present[0].shape[1]
    padded = torch.zeros(len(samples), longest, action_dim, device=device, dtype=dtype)
    horizons = []
    for row, sample in enumerate(samples):
        if sample.prefix is None:
            horizons.append(0)
        else:
            padded[row, : sample.prefix.shape[0]] = sample.prefix.to(device, dtype)
            horizons.append(min(execution_horizon, sample.prefix.shape[0]))
    return {
        "inference_delay": tuple(sample.inference_delay for sample in samples),
        "prev_chunk_left_over": padded,
        "execution_horizon": tuple(horizons),
    }


class BatchedRTCProcessor(RTCProcessor):
    """LeRobot's RTC processor, accepting one delay and one horizon per sample."""

    _weights_key: tuple | None = None
    _weights: torch.Tensor | None = None

    def denoise_step(
        self,
        x_t,
        prev_chunk_left_over,
        inference_delay,
        time,
        original_denoise_step_partial,
        execution_horizon=None,
    ) -> torch.Tensor:
        if prev_chunk_left_over is None or not isinstance(inference_delay, (tuple, list)):
            return super().denoise_step(
                x_t,
                prev_chunk_left_over,
                inference_delay,
                time,
                original_denoise_step_partial,
                execution_horizon,
            )
        batch_size, chunk_length, action_dim = x_t.shape
        if (
            not len(inference_delay)
            == len(execution_horizon)
            == batch_size
            == prev_chunk_left_over.shape[0]
        ):
            raise ValueError(
                f"per-sample RTC inputs must all have the batch size {batch_size}: "
                f"{len(inference_delay)} delays, "
                f"{len(execution_horizon)} horizons, {prev_chunk_left_over.shape[0]} prefixes"
            )
        weights = self._row_weights(
            tuple(inference_delay), tuple(execution_horizon), chunk_length, x_t.device
        )
        target = torch.zeros(batch_size, chunk_length, action_dim, device=x_t.device)
        steps, dims = (
            min(prev_chunk_left_over.shape[1], chunk_length),
            min(prev_chunk_left_over.shape[2], action_dim),
        )
        target[:, :steps, :dims] = prev_chunk_left_over[:, :steps, :dims]

        # From here on LeRobot's guidance step, with per-row weights.
        x_t = x_t.clone().detach()
        with torch.enable_grad():
            v_t = original_denoise_step_partial(x_t)
            x_t.requires_grad_(True)
            x1_t = x_t - time * v_t  # noqa: N806
            err = (target - x1_t) * weights
            correction = torch.autograd.grad(x1_t, x_t, err.clone().detach(), retain_graph=False)[
                0
            ]
        result = v_t - guidance_weight(time, self.rtc_config.max_guidance_weight) * correction
        self.track(time=time, x1_t=x1_t, correction=correction, err=err, weights=weights)
        return result

    def _row_weights(
        self, delays: tuple, horizons: tuple, chunk_length: int, device
    ) -> torch.Tensor:
        """Per-row prefix weights [batch, chunk_length, 1], built once per forward: every denoise
        step reuses them."""
        key = (delays, horizons, chunk_length, str(device))
        if self._weights_key != key:
            self._weights = (
                torch.stack(
                    [
                        self.get_prefix_weights(delay, horizon, chunk_length)
                        if horizon > 0
                        else torch.zeros(chunk_length)
                        for delay, horizon in zip(delays, horizons, strict=False)
                    ]
                )
                .to(device)
                .unsqueeze(-1)
            )
            self._weights_key = key
        return self._weights


def guidance_weight(time: float, max_guidance_weight: float) -> torch.Tensor:
    """LeRobot's RTC guidance weight at flow time ``time`` (1 = noise, 0 = actions), clamped."""
    max_weight = torch.as_tensor(max_guidance_weight)
    tau = torch.as_tensor(1 - time)
    squared_one_minus_tau = (1 - tau) ** 2
    inv_r2 = (squared_one_minus_tau + tau**2) / squared_one_minus_tau
    c = torch.nan_to_num((1 - tau) / tau, posinf=max_weight)
    return torch.minimum(torch.nan_to_num(c * inv_r2, posinf=max_weight), max_weight)


def install(policy) -> BatchedRTCProcessor:
    """Replace the policy's RTC processor (and its model's) with the batched one, as
    ``init_rtc_processor`` wires it."""
    processor = BatchedRTCProcessor(policy.config.rtc_config)
    policy.rtc_processor = processor
    model = getattr(policy, "model", None)
    if model is not None and hasattr(model, "rtc_processor"):
        model.rtc_processor = processor
    return processor
