"""Command-period jitter of chunk_executor_node against a bare rclpy timer, and its CPU and memory.

Jitter (--rates, default 100 and 250 Hz): policy_server_node serves an ACT
with two cameras at its own 96x128 resolution; the stand-in driver
(lerobot_ros/standins/robot_io.py) publishes joint states and records every
command it receives with the middleware's reception time; lerobot_ros/standins/camera_publisher.py
publishes two 480x640 cameras as raw rgb8 Images at 30 Hz (what a USB camera
driver publishes); chunk_executor_node streams chunks and publishes
forward_command commands. Each rate runs twice: the policy at that rate
(fps = rate), and a 30 Hz policy interpolated to that rate (fps 30,
control_rate_hz = rate). IN THE SAME RUN a bare rclpy timer process
(lerobot_ros/standins/bare_timer.py: one timer, the same Float64MultiArray, the
same QoS) publishes at the same rate to a second topic the same driver
records. Over a steady-state window both command streams are measured where
the driver's middleware receives them (its reception stamps: timer + GIL +
one DDS hop; the driver's subscriptions queue, so its own Python spin
neither delays a stamp nor drops a command), so the ratio executor / bare is
what the executor adds on this machine at that moment.

Resources (30 Hz, two cameras at 480x640): the same, with the cameras as
raw rgb8 Images (the executor JPEG-encodes each request's frames) and as JPEG
CompressedImages (forwarded untouched); CPU = utime + stime of the executor
process over the window, percent of one core; RSS at the end.

``--compare-checkout DIR`` runs every configuration it can (fps = rate, and
the resources) a second time, in the same run, with the executor of another
checkout (e.g. ``git archive <commit>`` unpacked into DIR) on PYTHONPATH:
a before/after table on one machine at one time.

usage: python -m bench.executor_jitter [--seconds 20] [--rates 100,250] [--compare-checkout DIR]
       [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.common import median, percentile
from lerobot_ros.sim.default_policy import build_act_checkpoint
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, SO101_JOINT_NAMES

CAMERAS = ["observation.images.cam0", "observation.images.cam1"]
SERVER = "bench_jitter_server"


def period_stats(times: list[float], fps: float) -> dict:
    periods = [(b - a) * 1000 for a, b in zip(times, times[1:], strict=False)]
    nominal = 1000 / fps
    errors = [abs(p - nominal) for p in periods]
    if not periods:
        return {
            "n": 0,
            "periods": [],
            "p50": float("nan"),
            "p99": float("nan"),
            "max": float("nan"),
            "err_p50": float("nan"),
            "err_p99": float("nan"),
            "err_max": float("nan"),
            "late": 0,
        }
    return {
        "n": len(times),
        "periods": periods,
        "p50": median(periods),
        "p99": percentile(periods, 0.99),
        "max": max(periods),
        "err_p50": median(errors),
        "err_p99": percentile(errors, 0.99),
        "err_max": max(errors),
        "late": sum(p > 1.5 * nominal for p in periods),
    }


def run(
    watcher,
    directory: Path,
    name: str,
    fps: float,
    seconds: float,
    height: int,
    width: int,
    transport: str,
    bare: bool,
    control_rate_hz: float = 0.0,
    checkout: Path | None = None,
) -> dict:
    rate = control_rate_hz or fps
    prefix = f"/{name}"
    out = directory / f"{name}.jsonl"
    commands = [f"forward_command:{prefix}/commands"] + (
        [f"forward_command:{prefix}/bare_commands"] if bare else []
    )
    run_s = str(seconds + 120)
    robot = common.start_script(
        directory,
        f"{name}_robot",
        [
            "-m",
            "lerobot_ros.standins.robot_io",
            "--prefix",
            prefix,
            "--out",
            str(out),
            *[a for c in commands for a in ("--command", c)],
            "--run-s",
            run_s,
        ],
    )
    cameras = common.start_script(
        directory,
        f"{name}_cameras",
        [
            "-m",
            "lerobot_ros.standins.camera_publisher",
            *[a for i in range(len(CAMERAS)) for a in ("--topic", f"{prefix}/cam{i}")],
            "--height",
            str(height),
            "--width",
            str(width),
            "--transport",
            transport,
            "--run-s",
            run_s,
        ],
    )
    baseline = (
        common.start_script(
            directory,
            f"{name}_bare",
            [
                "-m",
                "lerobot_ros.standins.bare_timer",
                "--topic",
                f"{prefix}/bare_commands",
                "--fps",
                str(rate),
                "--run-s",
                run_s,
            ],
        )
        if bare
        else None
    )
    executor_name = f"{name}_executor"
    watcher.watch_status(executor_name)
    # unknown to older checkouts
    interpolation = {"control_rate_hz": control_rate_hz} if control_rate_hz else {}
    env = {"PYTHONPATH": f"{checkout}:{common.REPO}"} if checkout else None
    executor = common.start_executor(
        directory,
        executor_name,
        {
            "server_namespace": f"/{SERVER}",
            "client_id": name,
            "fps": fps,
            "joint_names": list(SO101_JOINT_NAMES),
            "camera_names": CAMERAS,
            "camera_topics": [f"{prefix}/cam{i}" for i in range(len(CAMERAS))],
            "camera_transports": [transport] * len(CAMERAS),
            "state_topic": f"{prefix}/joint_states",
            "output_topic": f"{prefix}/commands",
            # A 50-step chunk lasts 0.5 s at 100 Hz: keep the staleness bounds above it.
            "buffer_time_s": 0.3,
            "degraded_after_s": 2.0,
            "max_action_age_s": 2.5,
            **interpolation,
        },
        env=env,
    )
    try:
        if not watcher.wait_streaming([executor_name], 2, 120, [executor]):
            raise RuntimeError(
                f"{executor_name} did not stream (exit {executor.poll()}):\n"
                + (directory / f"{executor_name}.log").read_text()[-3000:]
            )
        time.sleep(1.0)
        cpu_before, started = common.cpu_seconds(executor.pid), time.monotonic()
        before = common.counters(watcher.latest(executor_name))
        time.sleep(seconds)
        cpu_after, ended = common.cpu_seconds(executor.pid), time.monotonic()
        after = common.counters(watcher.latest(executor_name))
        rss = common.rss_mb(executor.pid)
    finally:
        common.stop_all([robot, cameras, baseline, executor])
    by_topic: dict[str, list[float]] = {}
    for line in out.read_text().splitlines():
        record = json.loads(line)
        if started <= record["t_received"] <= ended:
            by_topic.setdefault(record["topic"], []).append(record["t_received"])
    result = {
        "name": name,
        "fps": fps,
        "rate": rate,
        "interpolated": bool(control_rate_hz),
        "checkout": checkout,
        "seconds": ended - started,
        "transport": transport,
        "size": f"{height}x{width}",
        "executor": period_stats(by_topic.get(f"{prefix}/commands", []), rate),
        "bare": period_stats(by_topic.get(f"{prefix}/bare_commands", []), rate) if bare else None,
        "cpu": 100 * (cpu_after - cpu_before) / (ended - started),
        "rss": rss,
        "expected": round(rate * (ended - started)),
        "chunks": after["chunks_merged"] - before["chunks_merged"],
        "starvation": after["starvation_ticks"] - before["starvation_ticks"],
    }
    return result


def describe(result: dict) -> str:
    who = "previous executor" if result["checkout"] else "chunk_executor_node"
    if result["interpolated"]:
        return f"{who}, 30 Hz policy interpolated"
    return f"{who}, policy at {result['fps']:.0f} Hz"


def plot(results: list[dict], path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for ax, result in zip(axes[0], results, strict=False):
        nominal = 1000 / result["rate"]
        low = min(result["executor"]["periods"] + result["bare"]["periods"] + [nominal]) - 0.5
        high = max(result["executor"]["periods"] + result["bare"]["periods"] + [nominal]) + 0.5
        bins = [low + (high - low) * i / 80 for i in range(81)]
        ax.hist(
            result["bare"]["periods"],
            bins=bins,
            alpha=0.6,
            label="bare rclpy timer",
            color="#7f7f7f",
        )
        ax.hist(
            result["executor"]["periods"],
            bins=bins,
            alpha=0.6,
            label=describe(result),
            color="#1f77b4",
        )
        ax.axvline(nominal, color="k", lw=0.8, ls="--")
        ax.set_yscale("log")
        ax.set_xlabel("period between commands as received (ms)")
        ax.set_ylabel("count")
        ax.set_title(
            f"{result['rate']:.0f} Hz: p99 period error executor "
            f"{result['executor']['err_p99']:.2f} ms, "
            f"bare {result['bare']['err_p99']:.2f} ms",
            fontsize=8,
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0, help="steady-state window per run")
    parser.add_argument(
        "--rates", default="100,250", help="control rates of the jitter runs (Hz, comma-separated)"
    )
    parser.add_argument(
        "--compare-checkout",
        type=Path,
        default=None,
        help="another checkout whose executor runs the same configurations in the same run",
    )
    common.add_output_arguments(parser)
    args = parser.parse_args()
    document, plot_dir = common.outputs(args)
    rates = [float(rate) for rate in args.rates.split(",")]
    if args.smoke:
        args.seconds, rates = 2.0, [100.0]
    checkouts = [None] + ([args.compare_checkout.resolve()] if args.compare_checkout else [])
    # --smoke: one run, the interpolated one (control loop, interpolation, bare timer, driver,
    # plot); the policy-at-rate and resource runs start the same processes with other parameters.
    at_rate_checkouts = checkouts if not args.smoke else []
    resource_transports = ("raw", "compressed") if not args.smoke else ()
    load_before = common.load_average()
    watcher = common.Watcher("bench_jitter")
    jitter, resources = [], []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        checkpoint = build_act_checkpoint(
            tmp / "act_2cam", cameras={name: DEFAULT_IMAGE_SHAPE for name in CAMERAS}
        )
        server = common.start_server(
            tmp, SERVER, {"checkpoint": str(checkpoint), "max_sessions": 2}
        )
        try:
            for rate in rates:
                # same rate, before and after, back to back
                for index, checkout in enumerate(at_rate_checkouts):
                    jitter.append(
                        run(
                            watcher,
                            tmp,
                            f"jitter{int(rate)}_{index}",
                            rate,
                            args.seconds,
                            480,
                            640,
                            "raw",
                            True,
                            checkout=checkout,
                        )
                    )
                jitter.append(
                    run(
                        watcher,
                        tmp,
                        f"jitter{int(rate)}_interpolated",
                        30.0,
                        args.seconds,
                        480,
                        640,
                        "raw",
                        True,
                        control_rate_hz=rate,
                    )
                )
                print(f"done jitter {rate}", flush=True)
            for transport in resource_transports:
                for index, checkout in enumerate(checkouts):
                    resources.append(
                        run(
                            watcher,
                            tmp,
                            f"resources_{transport}_{index}",
                            30.0,
                            args.seconds,
                            480,
                            640,
                            transport,
                            False,
                            checkout=checkout,
                        )
                    )
                print(f"done resources {transport}", flush=True)
        finally:
            common.stop_all([server])
            watcher.close()
    load_after = common.load_average()

    def row(r):
        s, b = r["executor"], r["bare"]
        ratio = s["err_p99"] / b["err_p99"] if b["err_p99"] > 0 else float("inf")
        return (
            f"| {r['rate']:.0f} Hz | {describe(r)} | {s['n']} / {r['expected']} ({b['n']}) "
            f"| {s['p50']:.2f} / {s['p99']:.2f} / {s['max']:.2f} "
            f"| {s['err_p99']:.2f} ({b['err_p99']:.2f}) | **{ratio:.2f}** | {s['late']} "
            f"({b['late']}) "
            f"| {r['cpu']:.1f} % | {r['starvation']} |"
        )

    lines = [
        "| rate | executor | commands received / expected (bare timer) | period p50 / p99 / max "
        "(ms) "
        "| period error p99, ms (bare) | p99 ratio executor / bare | late > 1.5x period (bare) "
        "| executor CPU | empty-queue ticks |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [row(r) for r in jitter]
    resource_lines = [
        "| cameras (2 x 480x640 at 30 Hz) | executor | CPU (% of one core) | RSS | period error "
        "p99 "
        "| late | chunks merged |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in resources:
        kind = (
            "raw rgb8 Image (executor JPEG-encodes)"
            if r["transport"] == "raw"
            else "JPEG CompressedImage (forwarded)"
        )
        resource_lines.append(
            f"| {kind} | {'previous' if r['checkout'] else 'this checkout'} | {r['cpu']:.1f} % "
            f"| {r['rss']:.0f} MB | {r['executor']['err_p99']:.2f} ms | {r['executor']['late']} "
            f"| {r['chunks']} |"
        )
    compared = (
        f" The previous executor is the checkout `{args.compare_checkout.name}` run in the same "
        "session "
        "(fps = rate: it has no control_rate_hz)."
        if args.compare_checkout
        else ""
    )
    png = plot_dir / "bench_jitter.png"
    plot(jitter, png)
    body = f"""
**Jitter.** {args.seconds:.0f} s steady-state window per run (after the executor streams),
forward_command mode,
an ACT with two 96x128 cameras served on the same 2-core machine (its inference competes for the
CPU), fed two
480x640 raw rgb8 cameras at 30 Hz, buffer_time_s 0.3. Each executor run has its own bare rclpy
timer at the same
rate, received by the same driver process concurrently and timed by its middleware's reception
stamps (the
driver's subscriptions keep 100, so its own Python spin neither delays a time nor drops a command):
the bare
timer is the floor this machine gives any rclpy timer at that moment. Load average (1 min)
{load_before:.1f} before, {load_after:.1f} after
(2 cores, shared with other engineers' runs);
OMP_NUM_THREADS={os.environ.get("OMP_NUM_THREADS", "unset")} for every
process.{compared}

{chr(10).join(lines)}

![jitter histogram]({common.image_link(document, png)})

**Executor resources** at 30 Hz with two cameras at 480x640 (the policy's cameras are 96x128; the
server
resizes), {args.seconds:.0f} s window:

{chr(10).join(resource_lines)}

This checkout takes sensors from the middleware only when a request (or a hold) needs them: nothing
spins
the camera and joint-state subscriptions, whose newest sample waits in the middleware (keep-last 1)
and is
taken with its receive time when the observation is built (``executor/sensor_node.py``); a raw
frame is
deserialized and JPEG-encoded only then. Executors before it took every frame (2 x 0.9 MB at 30 Hz,
copied
into Python under the GIL) on a sensor thread. ~/status and /diagnostics are published by a thread
of their
own, the control loop runs on a thread with absolute deadlines (``executor/control_loop.py``), and
the
remaining callbacks (chunks, heartbeats, services, goals) spin on rclpy's MultiThreadedExecutor.
"""
    command = (
        "python -m bench.executor_jitter"
        + (" --smoke" if args.smoke else f" --seconds {args.seconds:g} --rates {args.rates}")
        + (
            f" --compare-checkout {args.compare_checkout.name}"
            if args.compare_checkout and not args.smoke
            else ""
        )
    )
    common.write_section("executor_jitter", command, body, document=document)


if __name__ == "__main__":
    main()
