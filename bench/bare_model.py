"""The bare model's time per chunk, in a fresh process, on its main thread: the floor a server's
model time is held to.

Loads a checkpoint with LeRobot's factories (through ``checkpoint.load_policy``),
feeds ``predict_action_chunk`` one preprocessed observation (random frames at
the policy's own camera resolution, the state at zero) ``--warmup`` + ``--requests``
times with nothing else in the process, and prints the measured durations as
JSON on stdout. ``server_request_latency.py`` runs it after the stacks of a
configuration and compares their model times with this one.

usage: python -m bench.bare_model CHECKPOINT [--requests 20] [--warmup 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline


def measure(checkpoint: str, requests: int, warmup: int, device: str) -> list[float]:
    import torch

    from lerobot_ros.server.policy.checkpoint import load_policy

    loaded = load_policy(checkpoint, device=device, rtc_enabled=False)
    observation = {"task": "", "observation.state": torch.zeros(loaded.capabilities.state_dim)}
    for camera in loaded.capabilities.cameras:
        observation[camera.name] = torch.rand(3, camera.height, camera.width)
    durations = []
    with torch.no_grad():
        batch = loaded.preprocessor(observation)
        for _ in range(warmup + requests):
            started = time.perf_counter()
            actions = loaded.policy.predict_action_chunk(batch)
            if actions.device.type == "cuda":
                torch.cuda.synchronize(actions.device)
            durations.append(time.perf_counter() - started)
    return durations[warmup:]


def in_fresh_process(
    checkpoint: Path, requests: int, warmup: int = 3, device: str = "cpu", torch_threads: int = 0
) -> list[float]:
    """``measure`` in a new interpreter (this script), so nothing else shares its threads;
    ``torch_threads`` intra-op threads (0: torch's default)."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.bare_model",
            str(checkpoint),
            f"--requests={requests}",
            f"--warmup={warmup}",
            f"--device={device}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
        env=common.torch_thread_env(torch_threads),
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"bare model run failed ({result.returncode}):\n{result.stderr[-2000:]}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("checkpoint")
    parser.add_argument("--requests", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(json.dumps(measure(args.checkpoint, args.requests, args.warmup, args.device)))


if __name__ == "__main__":
    main()
