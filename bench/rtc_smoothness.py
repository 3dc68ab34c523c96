"""Smoothness at chunk boundaries with real-time chunking on and off, in one run.

One policy_server_node serves the tiny RTC-capable SmolVLA (random weights)
to two simulated arms at once, each with its own chunk_executor_node: one asks
for RTC (replace mode, the executor's measured delay and unexecuted prefix go
with each request), the other does not (append mode). Both share the server,
the policy and the machine, so the comparison is taken in the same run. The
server's ``inject_delay_s`` stands in for a slower model, since real VLAs take
100-300 ms per chunk where the tiny one takes ~30 ms.

The executors measure, in robot units (radians, the largest change over the
joints), the jump between the last action executed from one chunk and the
first executed from the next, and the ordinary step between consecutive
actions of one chunk (ExecutorStatus: boundary_jump_mean/max,
action_step_mean). Means are over the measurement window; the max is since
start-up.

usage: python -m bench.rtc_smoothness [--seconds 25] [--inject-delay-s 0 0.1] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from lerobot_ros.launch_plan import robot_plan, server_namespace_of, server_plan
from lerobot_ros.processes import start_processes, stop_processes
from lerobot_ros.sim.default_policy import default_checkpoint

ROBOTS = {"rtc_on": True, "rtc_off": False}
STREAMING = ("STREAMING", "DEGRADED")


def run(
    checkpoint: str, inject_delay_s: float, seconds: float, warmup_s: float, log_dir: Path
) -> dict:
    import rclpy

    from lerobot_ros.msg import ExecutorStatus

    server = server_plan(
        checkpoint,
        device="cpu",
        rmw_implementation="",
        extra_parameters={"inject_delay_s": inject_delay_s, "audit_log": "off"},
    )
    plans = {"server": server}
    for name, rtc in ROBOTS.items():
        plans[name] = robot_plan(
            robot_namespace=name,
            server_namespace=server_namespace_of(server),
            client_id=name,
            sim=True,
            rmw_implementation="",
            extra_parameters={"rtc_requested": rtc},
        )
    node = rclpy.create_node(f"rtc_smoothness_{os.getpid()}")
    latest: dict[str, ExecutorStatus] = {}
    for name in ROBOTS:
        node.create_subscription(
            ExecutorStatus,
            f"/{name}/chunk_executor/status",
            lambda msg, name=name: latest.__setitem__(name, msg),
            10,
        )
    processes = []
    try:
        for (
            name,
            plan,
        ) in plans.items():  # a log folder per robot: both run nodes of the same names
            (log_dir / name).mkdir(exist_ok=True)
            processes += start_processes(plan, log_dir / name)
            # robots start once it answers, as they would join a running server
            if name == "server":
                _wait_for_server(node, server_namespace_of(server), processes)
        deadline = time.monotonic() + 120
        while not (
            len(latest) == len(ROBOTS) and all(s.state_name in STREAMING for s in latest.values())
        ):
            rclpy.spin_once(node, timeout_sec=0.05)
            exited = [name for name, process in processes if process.poll() is not None]
            if time.monotonic() > deadline or exited:
                states = {name: (s.state_name, s.reason) for name, s in latest.items()}
                raise RuntimeError(
                    f"the loop did not start streaming (exited: {exited}, states: {states}); logs "
                    f"in {log_dir}"
                )
        _spin(node, warmup_s)
        start = dict(latest)
        _spin(node, seconds)
        end = dict(latest)
    finally:
        stop_processes(processes)
        node.destroy_node()
    return {name: _window(start[name], end[name]) for name in ROBOTS}


def _wait_for_server(node, namespace: str, processes, timeout_s: float = 180.0) -> None:
    from lerobot_ros.executor.session.session_client import SessionClient

    client = SessionClient(node, namespace, "bench_rtc_smoothness")
    deadline = time.monotonic() + timeout_s
    try:
        while not client.wait_for_server(timeout_s=0.5):
            if time.monotonic() > deadline or any(
                process.poll() is not None for _, process in processes
            ):
                raise RuntimeError(f"policy_server_node did not come up within {timeout_s:g} s")
    finally:
        client.destroy()


def _spin(node, seconds: float) -> None:
    import rclpy

    until = time.monotonic() + seconds
    while time.monotonic() < until:
        rclpy.spin_once(node, timeout_sec=0.05)


def _window(start, end) -> dict:
    boundaries = end.chunk_boundaries - start.chunk_boundaries
    jump_sum = (
        end.boundary_jump_mean * end.chunk_boundaries
        - start.boundary_jump_mean * start.chunk_boundaries
    )
    return {
        "rtc_active": end.rtc_active,
        "chunks": end.chunks_merged - start.chunks_merged,
        "boundaries": boundaries,
        "jump_mean": jump_sum / boundaries if boundaries else float("nan"),
        "jump_max": end.boundary_jump_max,
        "step_mean": end.action_step_mean,
        "deviation_mean": end.prefix_deviation_mean,
        "deviation_max": end.prefix_deviation_max,
        "latency_p50_ms": end.latency_ms_p50,
        "delay_steps": end.last_delay_steps,
        "starved": end.starvation_ticks - start.starvation_ticks,
        "ticks": end.commands_published - start.commands_published,
    }


def table(results: dict[float, dict]) -> str:
    rows = [
        "| injected delay | robot | merge mode | chunks | prefix deviation mean (max) | boundary "
        "jump mean (max) "
        "| step mean | latency p50 | last delay (steps) | starved ticks |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for delay, robots in results.items():
        for name, r in robots.items():
            rows.append(
                f"| {delay * 1000:.0f} ms | {name} | "
                f"{'replace (RTC)' if r['rtc_active'] else 'append'} | {r['chunks']} "
                f"| **{r['deviation_mean']:.4f}** ({r['deviation_max']:.4f}) | "
                f"{r['jump_mean']:.3f} ({r['jump_max']:.3f}) "
                f"| {r['step_mean']:.3f} | {r['latency_p50_ms']:.0f} ms | {r['delay_steps']} | "
                f"{r['starved']} / {r['ticks']} |"
            )
    return "\n".join(rows)


def plot(results: dict[float, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    delays = list(results)
    width = 0.38
    for offset, (name, label, color) in enumerate(
        (("rtc_on", "RTC on (replace)", "#1f77b4"), ("rtc_off", "RTC off (append)", "#7f7f7f"))
    ):
        values = [max(results[delay][name]["deviation_mean"], 1e-4) for delay in delays]
        ax.bar(
            [i + (offset - 0.5) * width for i in range(len(delays))],
            values,
            width,
            label=label,
            color=color,
        )
    ax.set_xticks(range(len(delays)), [f"{delay * 1000:.0f} ms" for delay in delays])
    ax.set_xlabel("injected server delay")
    ax.set_ylabel("prefix deviation, mean (rad)")
    ax.set_yscale("log")
    ax.set_title("How far each new chunk starts from the motion being executed", fontsize=9)
    ax.legend(fontsize=8, loc="center")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=25.0, help="measurement window per delay")
    parser.add_argument("--warmup-s", type=float, default=3.0)
    parser.add_argument("--inject-delay-s", type=float, nargs="+", default=[0.0, 0.1])
    common.add_output_arguments(parser)
    args = parser.parse_args(argv)
    document, plot_dir = common.outputs(args)
    if args.smoke:
        args.seconds, args.warmup_s, args.inject_delay_s = 3.0, 1.0, [0.0]
    import rclpy

    checkpoint = str(default_checkpoint("smolvla"))
    rclpy.init()
    results = {}
    try:
        for delay in args.inject_delay_s:
            logs = Path(tempfile.mkdtemp(prefix=f"rtc_smoothness_{delay:g}_"))
            results[delay] = run(checkpoint, delay, args.seconds, args.warmup_s, logs)
    finally:
        rclpy.try_shutdown()
    command = "python -m bench.rtc_smoothness " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    body = f"""\
Two simulated arms on one server running the tiny SmolVLA (random weights, chunk 50, 30 Hz), at the
same time: `rtc_on` asks for real-time chunking (replace mode, measured delay + prefix sent),
`rtc_off` does not
(append mode). The server's `inject_delay_s` adds a fixed delay to every inference, standing in for
a bigger model.
{args.seconds:g} s per row after {args.warmup_s:g} s of warm-up; all values in radians, the largest
change over the
six joints.

- **prefix deviation**: while a chunk is inferred the robot keeps executing the old one; the new
chunk's first
  actions cover those same steps. Their distance to what was executed then (mean over those steps,
then over
  merges; max over merges since start-up) is how far the new chunk starts from where the motion is.
- **boundary jump**: the change between the last action executed from one chunk and the first from
the next
  (mean over the window, max since start-up), against the ordinary **step** between actions of one
chunk.

{table(results)}

With RTC the new chunk's first actions are held to the actions being executed, so it continues the
motion
(deviation near zero); without it each chunk starts from fresh noise, as far from the motion as two
samples of
the policy are from each other. This policy has random weights, so its chunks are rough (steps as
large as
the jumps) and the boundary jump cannot show the difference; a trained policy's smooth chunks make
that column
show it too."""
    png = plot_dir / "bench_rtc_smoothness.png"
    plot(results, png)
    body += f"\n\n![prefix deviation with RTC on and off]({common.image_link(document, png)})"
    common.write_section("rtc_smoothness", command.strip(), body, document=document)
    return 0


if __name__ == "__main__":
    sys.exit(main())
