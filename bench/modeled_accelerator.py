"""A MODELED accelerator: the product's policy server with only its forward replaced by a timing
model.

There is no GPU in the room, yet the question is how many robots one
accelerator holds (issue 32). This module stands in for the device, and
nothing else: the server runs as its own product process
(``lerobot_ros.server.node.main``) over the real ROS data plane, with the
checkpoint's real LeRobot pre- and postprocessors, real decoding, signing,
publishing and auditing. Only ``PolicyRunner.infer`` is swapped, through the
bench-only hook ``lerobot_ros.server.policy.startup.override_forward``, for a model:

    a forward of a batch of b takes t(b) = t0 + k*b of wall time,
    holding the GIL for a share g of it

(busy-spinning in pure Python for g of each 1 ms slice and sleeping, GIL
released, for the rest, so it contends for the GIL the way an eager,
launch-bound GPU forward does; g = 0 sleeps the whole forward, as a captured
graph would). It returns a correctly shaped chunk of zeros, float32 in model
space, [b, chunk_size, action_dim] as the checkpoint's ``predict_action_chunk``
would, so the session's real postprocessor runs on every row. The forward's
wall time is what it returns as inference seconds, so the server's audit log
(``inference_ms``, ``batch_size`` per request) says how long the modeled
device was busy.

Profiles (t0, k in ms): ``act-gpu`` (5, 0.5), ``smolvla-gpu`` (35, 4) and
``pi05-gpu`` (58, 16; from the published pi0.5 serving numbers, 13.5 req/s at
batch 1 and 33 req/s at batch 4). They are assumptions, not measurements:
replace them with curves ``bench/forward_curve.py`` measured on a GPU
(``--t0-ms``/``--k-ms``), and say which is which. Every number a benchmark
takes from this server is labelled "modeled accelerator".

usage: python -m bench.modeled_accelerator --profile act-gpu --gil 0.5 [--t0-ms T0 --k-ms K]
       --ros-args -p checkpoint:=...
The flags before ``--ros-args`` default to the environment (``BENCH_ACCELERATOR_PROFILE``,
``BENCH_ACCELERATOR_GIL``, ``BENCH_ACCELERATOR_T0_MS``, ``BENCH_ACCELERATOR_K_MS``), which is how a
benchmark started through ``lerobot_ros.processes.spawn_node`` sets them. Do not import
bench.common here: it would give this process a ROS domain of its own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass

#: name -> (t0 ms, k ms, where the numbers come from)
PROFILES = {
    "act-gpu": (5.0, 0.5, "assumed: a small ACT on a data-centre GPU"),
    "smolvla-gpu": (35.0, 4.0, "assumed: SmolVLA (450M) on a data-centre GPU"),
    "pi05-gpu": (
        58.0,
        16.0,
        "published pi0.5 serving numbers: 13.5 req/s at batch 1, 33 req/s at batch 4",
    ),
}
SLICE_S = 0.001  # one launch-bound step: GIL held for g of it, released for the rest
ENVIRONMENT = {
    "profile": "BENCH_ACCELERATOR_PROFILE",
    "gil": "BENCH_ACCELERATOR_GIL",
    "t0_ms": "BENCH_ACCELERATOR_T0_MS",
    "k_ms": "BENCH_ACCELERATOR_K_MS",
}


@dataclass(frozen=True)
class Curve:
    """t(b) = t0 + k*b seconds, holding the GIL for a share ``gil`` of it; ``name`` labels it as a
    model."""

    name: str
    t0_s: float
    k_s: float
    gil: float

    def __post_init__(self) -> None:
        if self.t0_s < 0 or self.k_s < 0:
            raise ValueError(f"t0 and k must be >= 0 seconds, got t0={self.t0_s} k={self.k_s}")
        if not 0.0 <= self.gil <= 1.0:
            raise ValueError(f"the GIL share g must be within [0, 1], got {self.gil}")

    @classmethod
    def of(
        cls, profile: str, gil: float, t0_ms: float | None = None, k_ms: float | None = None
    ) -> Curve:
        """A named profile, or ``t0_ms``/``k_ms`` given (a measured curve, named ``profile``)."""
        if t0_ms is None or k_ms is None:
            if profile not in PROFILES:
                raise ValueError(
                    f"unknown profile {profile!r}: choose one of {sorted(PROFILES)} or give t0 "
                    "and k"
                )
            t0_ms, k_ms, _ = PROFILES[profile]
        return cls(profile, t0_ms / 1000.0, k_ms / 1000.0, gil)

    def seconds(self, batch: int) -> float:
        return self.t0_s + self.k_s * batch

    def describe(self) -> str:
        return (
            f"modeled accelerator {self.name}: t(b) = {self.t0_s * 1000:g} + "
            f"{self.k_s * 1000:g}*b ms, "
            f"GIL held {100 * self.gil:.0f} % of it"
        )


def hold(seconds: float, gil: float, slice_s: float = SLICE_S) -> None:
    """Take ``seconds`` of wall time, running Python (holding the GIL) for a share ``gil`` of each
    slice.

    Slice boundaries are absolute, so a late wake-up shortens the next spin
    instead of stretching the forward; waiting for the GIL after a sleep does
    stretch it, as it would a real eager forward.
    """
    started = time.perf_counter()
    end = started + seconds
    if gil <= 0.0:
        time.sleep(max(0.0, seconds))
        return
    slice_start = started
    while slice_start < end:
        slice_end = min(end, slice_start + slice_s)
        spin_until = slice_start + gil * (slice_end - slice_start)
        while time.perf_counter() < spin_until:
            pass
        rest = slice_end - time.perf_counter()
        if rest > 0:
            time.sleep(rest)
        slice_start = slice_end


def action_shape(runner) -> tuple[int, int]:
    """(chunk_size, action_dim) of what the checkpoint's ``predict_action_chunk`` returns per
    row."""
    config = runner.loaded.config
    action = (
        config.output_features.get("action") if getattr(config, "output_features", None) else None
    )
    dim = int(action.shape[0]) if action is not None else len(runner.capabilities.action_names)
    return int(config.chunk_size), dim


def modeled_forward(curve: Curve):
    """``make_forward`` for ``override_forward``: the runner's ``infer`` replaced by ``curve``."""
    import torch

    def make(runner):
        chunk_size, dim = action_shape(runner)
        device = runner.capabilities.device

        def infer(prepared):
            started = time.perf_counter()
            hold(curve.seconds(len(prepared)), curve.gil)
            actions = torch.zeros(
                len(prepared), chunk_size, dim, dtype=torch.float32, device=device
            )
            return actions, time.perf_counter() - started

        infer.__doc__ = curve.describe()
        return infer

    return make


def _arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    split = argv.index("--ros-args") if "--ros-args" in argv else len(argv)
    env = {key: os.environ.get(name) for key, name in ENVIRONMENT.items()}
    parser = argparse.ArgumentParser(
        description="the policy server with a modeled accelerator (bench only)"
    )
    parser.add_argument(
        "--profile",
        default=env["profile"] or "act-gpu",
        help=f"{', '.join(PROFILES)}; or a name for the curve --t0-ms/--k-ms give",
    )
    parser.add_argument(
        "--gil",
        type=float,
        default=float(env["gil"] or 0.0),
        help="share g of t(b) holding the GIL",
    )
    parser.add_argument(
        "--t0-ms", type=float, default=float(env["t0_ms"]) if env["t0_ms"] else None
    )
    parser.add_argument("--k-ms", type=float, default=float(env["k_ms"]) if env["k_ms"] else None)
    return parser.parse_args(argv[:split]), argv[split:]


def main(argv: list[str] | None = None) -> None:
    args, ros_args = _arguments(sys.argv[1:] if argv is None else argv)
    curve = Curve.of(args.profile, args.gil, args.t0_ms, args.k_ms)
    from lerobot_ros.server import node
    from lerobot_ros.server.policy import startup

    startup.override_forward(modeled_forward(curve))
    node.main([sys.argv[0], *ros_args])


if __name__ == "__main__":
    main()
