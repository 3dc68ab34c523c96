"""Warm a loaded policy up before the server advertises itself as ready.

The first forward passes pay for lazy allocations, cuDNN autotuning and
kernel compilation; a robot must never pay for them inside its control loop.
The warm-up runs the same chain a request runs: preprocess, predict a chunk,
postprocess.
"""

from __future__ import annotations

import time

import torch

from lerobot_ros.server.checkpoint import LoadedPolicy


def synthetic_observation(loaded: LoadedPolicy, task: str = "") -> dict:
    """A neutral observation with every feature the policy reads."""
    capabilities = loaded.capabilities
    observation: dict = {"task": task}
    if capabilities.state_dim:
        observation["observation.state"] = torch.zeros(capabilities.state_dim)
    for camera in capabilities.cameras:
        observation[camera.name] = torch.full((3, camera.height, camera.width), 0.5)
    return observation


@torch.no_grad()
def warm_up(loaded: LoadedPolicy, inferences: int, task: str = "") -> list[float]:
    """Run ``inferences`` full predict passes; return each one's duration (s)."""
    durations = []
    for _ in range(inferences):
        started = time.perf_counter()
        batch = loaded.preprocessor(synthetic_observation(loaded, task))
        chunk = loaded.policy.predict_action_chunk(batch)
        loaded.postprocessor(chunk)
        durations.append(time.perf_counter() - started)
    return durations
