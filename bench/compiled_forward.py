"""Does compiling the policy's forward pay? The server's ``compile_mode`` against eager, in one
run.

For each policy (ACT 96x128 with one camera; the tiny SmolVLA without RTC and
with RTC) and each way of running it (eager; ``torch.compile`` with
``--backend`` in ``--mode``), a fresh process does what policy_server_node
does at start-up: loads the checkpoint (``startup.load_runner``, with the
compile settings), warms it up (``warmup.warm_up``: the time a compiled
server takes to become ready, since the warm-up compiles), then answers
``--requests`` observations through the request path (decode, preprocess,
forward, postprocess; RTC requests carry the previous chunk's prefix). Per
request: the forward's time (the chunk's ``inference_s``) and the whole
request path's; per process: the graphs dynamo compiled, and whether it hit
its recompile limit (then part of the forward runs eager).

Every process runs torch with ``--torch-threads`` intra-op threads (1, as the
server's default). The largest difference between a compiled chunk and the
eager one for the same observation (same noise seed) is reported too.

usage: python -m bench.compiled_forward [--requests 20] [--backend inductor] [--mode default]
       [--device cpu] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.common import median, percentile

POLICIES = {  # name: (label, builder, RTC on)
    "act": ("ACT 96x128, 1 camera", "act", False),
    "smolvla": ("tiny SmolVLA, no RTC", "smolvla", False),
    "smolvla_rtc": ("tiny SmolVLA, RTC", "smolvla", True),
}


def build(kind: str, directory: Path) -> Path:
    from lerobot_ros.sim.default_policy import build_act_checkpoint, build_smolvla_checkpoint

    return (build_act_checkpoint if kind == "act" else build_smolvla_checkpoint)(directory)


def measure(
    checkpoint: str, rtc: bool, compile_mode: str, backend: str, requests: int, device: str
) -> dict:
    """In this process: start-up as the server's, then ``requests`` answered; the timings as a
    dict."""
    import logging

    from torch._dynamo.utils import counters

    from lerobot_ros.server.policy.startup import load_runner
    from lerobot_ros.server.policy.warmup import synthetic_rounds, warm_up
    from lerobot_ros.server.settings import ServerSettings

    limit_hits = []

    class LimitWatch(logging.Handler):
        def emit(self, record):
            if "recompile_limit" in record.getMessage():
                limit_hits.append(record)

    logging.getLogger("torch._dynamo").addHandler(LimitWatch())
    settings = ServerSettings.from_values(
        {
            "checkpoint": checkpoint,
            "device": device,
            "rtc_enabled": rtc,
            "compile_mode": compile_mode,
            "compile_backend": backend,
            "noise_seed": 7,
        }
    )
    runner = load_runner(settings, logging.getLogger("bench"))
    started = time.perf_counter()
    warm_up(runner, 2)
    warmup_s = time.perf_counter() - started
    model, path, chunks = [], [], []
    for seconds, (outcome,) in synthetic_rounds(runner, requests):
        path.append(seconds)
        model.append(outcome.reply.inference_s)
        chunks.append(np.asarray(outcome.reply.actions_robot).tolist())
    return {
        "warmup_s": warmup_s,
        "model": model,
        "path": path,
        "graphs": counters["stats"]["unique_graphs"],
        "limit_hits": len(limit_hits),
        "chunks": chunks,
    }


def in_fresh_process(
    checkpoint: Path,
    rtc: bool,
    compile_mode: str,
    backend: str,
    requests: int,
    device: str,
    torch_threads: int,
) -> dict:
    argv = [
        sys.executable,
        "-m",
        "bench.compiled_forward",
        "--child",
        str(checkpoint),
        f"--rtc={int(rtc)}",
        f"--mode={compile_mode}",
        f"--backend={backend}",
        f"--requests={requests}",
        f"--device={device}",
    ]
    result = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
        env=common.torch_thread_env(torch_threads),
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"{compile_mode} run of {checkpoint.name} failed "
            f"({result.returncode}):\n{result.stderr[-3000:]}"
        )
    return json.loads(result.stdout.strip().splitlines()[-1])


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.9 * len(rows)))
    for index, row in enumerate(rows):
        for offset, (key, color) in enumerate((("eager", "#1f77b4"), ("compiled", "#ff7f0e"))):
            value = median(row[key]["model"]) * 1000
            ax.barh(
                index + 0.2 * (2 * offset - 1),
                value,
                height=0.4,
                color=color,
                label=key if index == 0 else None,
            )
            ax.text(
                value, index + 0.2 * (2 * offset - 1), f" {value:.1f} ms", va="center", fontsize=8
            )
    ax.set_yticks(range(len(rows)), [row["label"] for row in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("forward time per request, median (ms)")
    ax.set_xlim(0, ax.get_xlim()[1] * 1.25)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--requests", type=int, default=20, help="measured requests per policy and mode"
    )
    parser.add_argument(
        "--backend",
        default="inductor",
        help="torch.compile backend (the server's compile_backend)",
    )
    parser.add_argument(
        "--mode", default="default", help="torch.compile mode (the server's compile_mode)"
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument(
        "--policies",
        default="",
        help=f"only these, e.g. act,smolvla (default: all of {', '.join(POLICIES)})",
    )
    parser.add_argument("--child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--rtc", type=int, default=0, help=argparse.SUPPRESS)
    common.add_output_arguments(parser)
    args = parser.parse_args()
    if args.child:
        print(
            json.dumps(
                measure(
                    args.child, bool(args.rtc), args.mode, args.backend, args.requests, args.device
                )
            )
        )
        return
    document, plot_dir = common.outputs(args)
    chosen = [name for name in args.policies.split(",") if name] or list(POLICIES)
    unknown = sorted(set(chosen) - set(POLICIES))
    if unknown:
        parser.error(f"--policies: unknown {unknown}; choose from {list(POLICIES)}")
    if args.smoke:  # seconds: the ACT alone, AOTAutograd with eager kernels (no code generation)
        chosen, args.requests, args.backend = ["act"], 2, "aot_eager"
    policies = {POLICIES[name][0]: POLICIES[name][1:] for name in chosen}
    started = time.monotonic()
    load_before = common.load_average()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        checkpoints = {}
        for label, (kind, rtc) in policies.items():
            if kind not in checkpoints:
                checkpoints[kind] = build(kind, Path(tmp) / kind)
            row = {"label": label}
            for key, mode in (("eager", "none"), ("compiled", args.mode)):
                row[key] = in_fresh_process(
                    checkpoints[kind],
                    rtc,
                    mode,
                    args.backend,
                    args.requests,
                    args.device,
                    args.torch_threads,
                )
                print(
                    f"{label}, {key}: model {median(row[key]['model']) * 1000:.1f} ms, warm-up "
                    f"{row[key]['warmup_s']:.1f} s",
                    flush=True,
                )
            rows.append(row)
    png = plot_dir / "bench_compiled_forward.png"
    plot(rows, png)
    lines = [
        f"Each policy answered {args.requests} requests through the request path in a fresh "
        "process per mode, after "
        "the server's warm-up (2 requests, then forward passes of two sessions when compiled); "
        "torch with "
        f"{args.torch_threads} intra-op thread(s), device {args.device}, backend {args.backend}, "
        f"mode {args.mode}. "
        f"Medians (p95). Load average (1 min) {load_before:.1f} before, "
        f"{common.load_average():.1f} after; "
        f"{time.monotonic() - started:.0f} s in all.",
        "",
        "| policy | forward, eager (ms) | forward, compiled (ms) | compiled / eager | request "
        "path, eager (ms) "
        "| request path, compiled (ms) | warm-up, eager (s) | warm-up, compiled (s) | graphs "
        "compiled "
        "| recompile limit hit | largest chunk difference |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        eager, fast = row["eager"], row["compiled"]
        difference = float(np.abs(np.asarray(eager["chunks"]) - np.asarray(fast["chunks"])).max())
        cells = [row["label"]]
        cells += [
            f"{median(run['model']) * 1000:.1f} ({percentile(run['model'], 0.95) * 1000:.1f})"
            for run in (eager, fast)
        ]
        cells.append(f"{median(fast['model']) / median(eager['model']):.2f}")
        cells += [
            f"{median(run['path']) * 1000:.1f} ({percentile(run['path'], 0.95) * 1000:.1f})"
            for run in (eager, fast)
        ]
        cells += [
            f"{eager['warmup_s']:.1f}",
            f"{fast['warmup_s']:.1f}",
            str(fast["graphs"]),
            f"yes ({fast['limit_hits']})" if fast["limit_hits"] else "no",
            f"{difference:.1e}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"![compiled forward]({common.image_link(document, png)})"]
    command = "python -m bench.compiled_forward" + (" --smoke" if args.smoke else "")
    if not args.smoke:
        command += f" --requests {args.requests}" if args.requests != 20 else ""
        command += f" --policies {args.policies}" if args.policies else ""
        if (args.backend, args.mode, args.device) != ("inductor", "default", "cpu"):
            command += f" --backend {args.backend} --mode {args.mode} --device {args.device}"
    common.write_section("compiled_forward", command, "\n".join(lines), document)


if __name__ == "__main__":
    main()
