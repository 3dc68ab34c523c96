"""The forward's service curve t(b) and its GIL share g, for the modeled accelerator (issue 32).

usage: python -m bench.forward_curve [--policies act,pi0,pi05] [--batches 1,2,4,8,16,32,64]
       [--device cuda] [--dtype bfloat16] [--repeats 20] [--warmup 3] [--small] [--out FILE.json]

For each policy, LeRobot's own model at its default size with random weights
(nothing is downloaded: ACT without pretrained backbone weights; pi0 and
pi0.5 from the PaliGemma/Gemma variants LeRobot builds itself), three
224x224 cameras, a 6-joint state and action, chunk 50, and a 48-token task
for the language models. It times ``predict_action_chunk`` alone at every
batch size (medians and p95 over ``--repeats``, after ``--warmup``), fits
t(b) = t0 + k*b by least squares, and measures g, the share of a forward's
wall time during which it holds the GIL: a pure-Python counter thread runs
alone, then beside back-to-back forwards, and g = 1 - (its rate beside) /
(its rate alone). On a GPU an eager forward spends its host time launching
kernels under the GIL; on a CPU torch's kernels release it.

SmolVLA is left out at real size: its VLM's configuration (SmolVLM2-500M)
comes from the Hub, and writing its dimensions here from memory would time
a model nobody can check. ``--small`` builds reduced variants (ACT's small
test size, pi0/pi0.5 with one layer per Gemma, 1 denoising step) so the whole script
rehearses in seconds on a CPU.

It imports neither ROS nor lerobot_ros, so it runs on the GPU machine with
only torch and the carried LeRobot wheels.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import threading
import time

import torch

CAMERAS = ("observation.images.cam0", "observation.images.cam1", "observation.images.cam2")
IMAGE_SIZE = 224
JOINTS = 6
CHUNK = 50
TASK_TOKENS = 48


def _features(image_shape):
    from lerobot.configs.types import FeatureType, PolicyFeature

    inputs = {name: PolicyFeature(type=FeatureType.VISUAL, shape=image_shape) for name in CAMERAS}
    inputs["observation.state"] = PolicyFeature(type=FeatureType.STATE, shape=(JOINTS,))
    return inputs, {"action": PolicyFeature(type=FeatureType.ACTION, shape=(JOINTS,))}


def _shallow_gemma(modeling) -> None:
    """--small only: every Gemma of ``modeling`` keeps its widths but has one layer (LeRobot's
    PaliGemma projects the vision tower to 2048 wide, so the narrower gemma_300m variant cannot
    stand in for it)."""
    full = modeling.get_gemma_config
    if getattr(full, "shallow", False):
        return

    def shallow(variant: str):
        config = full(variant)
        config.depth = 1
        return config

    shallow.shallow = True
    modeling.get_gemma_config = shallow


def build(name: str, small: bool, device: str, dtype: str):
    """LeRobot's policy ``name`` with random weights, on ``device``, in eval mode."""
    inputs, outputs = _features((3, IMAGE_SIZE, IMAGE_SIZE))
    if name == "act":
        from lerobot.policies.act.configuration_act import ACTConfig
        from lerobot.policies.act.modeling_act import ACTPolicy

        size = dict(dim_model=256, dim_feedforward=1024, n_encoder_layers=2) if small else {}
        config = ACTConfig(
            input_features=inputs,
            output_features=outputs,
            chunk_size=CHUNK,
            n_action_steps=CHUNK,
            pretrained_backbone_weights=None,
            device=device,
            **size,
        )
        policy = ACTPolicy(config)
    elif name in ("pi0", "pi05"):
        if name == "pi0":
            from lerobot.policies.pi0.configuration_pi0 import PI0Config as Config
            from lerobot.policies.pi0.modeling_pi0 import PI0Policy as Policy
        else:
            from lerobot.policies.pi05.configuration_pi05 import PI05Config as Config
            from lerobot.policies.pi05.modeling_pi05 import PI05Policy as Policy
        size = {}
        if small:
            _shallow_gemma(sys.modules[Policy.__module__])
            size = dict(num_inference_steps=1)
        config = Config(
            input_features=inputs,
            output_features=outputs,
            chunk_size=CHUNK,
            n_action_steps=CHUNK,
            device=device,
            dtype=dtype if device != "cpu" else "float32",
            **size,
        )
        policy = Policy(config)
    else:
        raise SystemExit(f"unknown policy {name!r}: expected act, pi0 or pi05")
    return policy.to(device).eval()


def batch_of(size: int, device: str) -> dict:
    """A preprocessed batch: images in [0, 1], a normalised state, task tokens with a full mask."""
    generator = torch.Generator().manual_seed(size)
    batch = {
        name: torch.rand(size, 3, IMAGE_SIZE, IMAGE_SIZE, generator=generator) for name in CAMERAS
    }
    batch["observation.state"] = torch.randn(size, JOINTS, generator=generator)
    batch["observation.language.tokens"] = torch.randint(
        0, 1000, (size, TASK_TOKENS), generator=generator
    )
    batch["observation.language.attention_mask"] = torch.ones(size, TASK_TOKENS, dtype=torch.bool)
    return {key: value.to(device) for key, value in batch.items()}


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_forward(policy, size: int, device: str, repeats: int, warmup: int) -> list[float]:
    """Seconds per ``predict_action_chunk`` at batch ``size``, the actions on the host (as the
    server needs them)."""
    batch = batch_of(size, device)
    times = []
    with torch.inference_mode():
        for index in range(warmup + repeats):
            policy.reset()
            _synchronize(device)
            start = time.perf_counter()
            actions = policy.predict_action_chunk(batch)
            actions.float().cpu()
            elapsed = time.perf_counter() - start
            if index >= warmup:
                times.append(elapsed)
    assert tuple(actions.shape) == (size, CHUNK, JOINTS), (
        f"expected ({size}, {CHUNK}, {JOINTS}), got {tuple(actions.shape)}"
    )
    return times


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares t0, k of t(b) = t0 + k*b over (batch, seconds) points."""
    sizes = [b for b, _ in points]
    mean_b, mean_t = statistics.fmean(sizes), statistics.fmean(t for _, t in points)
    spread = sum((b - mean_b) ** 2 for b in sizes)
    k = sum((b - mean_b) * (t - mean_t) for b, t in points) / spread if spread else 0.0
    return mean_t - k * mean_b, k


def _counter_rate(seconds: float, busy=None) -> float:
    """Increments per second of a pure-Python loop, alone or while ``busy()`` runs on this
    thread."""
    stop, count = threading.Event(), [0]

    def count_up():
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=count_up, daemon=True)
    start = time.perf_counter()
    thread.start()
    end = start + seconds
    while time.perf_counter() < end:
        busy() if busy else time.sleep(0.01)
    stop.set()
    thread.join()
    return count[0] / (time.perf_counter() - start)


def gil_share(policy, size: int, device: str, seconds: float) -> float:
    """g: the share of forward time the forward thread holds the GIL (see the module docstring)."""
    batch = batch_of(size, device)

    def forward():
        with torch.inference_mode():
            policy.reset()
            policy.predict_action_chunk(batch).float().cpu()

    forward()
    alone = _counter_rate(seconds)
    beside = _counter_rate(seconds, forward)
    return max(0.0, min(1.0, 1.0 - beside / alone))


def versions(device: str) -> dict:
    import lerobot

    found = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lerobot": lerobot.__version__,
        "lerobot_from": lerobot.__file__,
        "device": device,
    }
    if device.startswith("cuda"):
        found.update(cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0))
    return found


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policies", default="act,pi0,pi05")
    parser.add_argument("--batches", default="1,2,4,8,16,32,64")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dtype", default="bfloat16", help="pi0/pi0.5 weights on a GPU (float32 on the CPU)"
    )
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--gil-seconds", type=float, default=2.0)
    parser.add_argument(
        "--small", action="store_true", help="reduced variants: a rehearsal, not a measurement"
    )
    parser.add_argument("--out", default="", help="write the JSON here too")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    result = {"versions": versions(args.device), "small": args.small, "policies": {}}
    for name in args.policies.split(","):
        started = time.perf_counter()
        policy = build(name, args.small, args.device, args.dtype)
        curve = {}
        for size in (int(b) for b in args.batches.split(",")):
            times = time_forward(policy, size, args.device, args.repeats, args.warmup)
            curve[size] = {
                "median_ms": 1e3 * statistics.median(times),
                "p95_ms": 1e3 * sorted(times)[max(0, round(0.95 * len(times)) - 1)],
            }
            print(
                f"{name} b={size}: {curve[size]['median_ms']:.1f} ms (p95 "
                f"{curve[size]['p95_ms']:.1f})",
                flush=True,
            )
        t0, k = fit([(size, point["median_ms"] / 1e3) for size, point in curve.items()])
        g = gil_share(policy, 1, args.device, args.gil_seconds)
        result["policies"][name] = {
            "t_ms": curve,
            "t0_ms": 1e3 * t0,
            "k_ms": 1e3 * k,
            "g": g,
            "parameters_m": sum(p.numel() for p in policy.parameters()) / 1e6,
            "seconds": time.perf_counter() - started,
        }
        print(f"{name}: t(b) = {1e3 * t0:.2f} + {1e3 * k:.2f}*b ms, g = {g:.2f}", flush=True)
        del policy
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    text = json.dumps(result, indent=2)
    if args.out:
        with open(args.out, "w") as handle:
            handle.write(text + "\n")
    print(text)
    return result


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
