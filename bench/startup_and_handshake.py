"""Start-up and handshake costs of the two nodes on this machine.

Measures (medians, and spread where it matters):
- import time of the robot-side node module vs the server's checkpoint
  loader, which pulls in torch and LeRobot (a fresh interpreter each time,
  including the ROS wheels' one-time re-exec);
- policy_server_node start-up on the default policy: spawn -> ~/get_status
  answers, and the load / warm-up times the node logs;
- GetStatus round trip from a client in another process;
- a whole executor handshake: process start -> accepted -> exit.

usage: python -m bench.startup_and_handshake [--calls 300] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time

from bench import (
    common,  # first: it isolates the ROS graph and keeps the Hub offline
    outside_load,
)
from bench.report import write_section
from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.sim.default_policy import default_checkpoint
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    outside_load.watch()

    imports = {
        module: [timed([sys.executable, "-c", f"import {module}"]) for _ in range(args.runs)]
        for module in ("lerobot_ros.executor.node", "lerobot_ros.server.policy.checkpoint")
    }

    import rclpy

    from lerobot_ros.executor.session.session_client import SessionClient

    checkpoint = default_checkpoint()
    rclpy.init()
    node = rclpy.create_node("bench_client")
    client = SessionClient(node, "/lerobot", "bench_client")
    startups, loads, warmups, round_trips, handshakes = [], [], [], [], []
    for run in range(args.runs):
        with tempfile.NamedTemporaryFile("w+", suffix=".log") as log:
            started = time.perf_counter()
            server = spawn_node(
                "lerobot_ros.server.node", {"checkpoint": str(checkpoint)}, log=log
            )
            while not client.wait_for_server(timeout_s=0.01):
                if time.perf_counter() - started > 300:
                    raise SystemExit("server did not start")
            startups.append(time.perf_counter() - started)
            if run == 0:
                for _ in range(args.calls):
                    sent = time.perf_counter()
                    if isinstance(client.get_status(timeout_s=5.0), str):
                        raise SystemExit("GetStatus did not answer")
                    round_trips.append(time.perf_counter() - sent)
            handshakes.append(
                timed(
                    [
                        sys.executable,
                        "-m",
                        "lerobot_ros.executor.node",
                        "--ros-args",
                        "-p",
                        f"joint_names:={json.dumps(list(SO101_JOINT_NAMES))}",
                        "-p",
                        "handshake_only:=true",
                    ]
                )
            )
            stop(server)
            log.seek(0)
            text = log.read()
            loads.append(float(re.search(r"loaded \S+ in ([\d.]+) s", text).group(1)))
            warmups.append(
                [
                    int(ms)
                    for ms in re.findall(
                        r"(\d+) ms", text.split("warm-up done:")[1].splitlines()[0]
                    )
                ]
            )
    node.destroy_node()
    rclpy.shutdown()

    ms = lambda seconds: f"{seconds * 1000:.1f} ms"  # noqa: E731
    executor_import = statistics.median(imports["lerobot_ros.executor.node"])
    server_import = statistics.median(imports["lerobot_ros.server.policy.checkpoint"])
    executor_imports = imports["lerobot_ros.executor.node"]
    server_imports = imports["lerobot_ros.server.policy.checkpoint"]
    rows = "\n".join(
        [
            common.table_row(
                "`import lerobot_ros.executor.node` (fresh interpreter, robot side)",
                f"{executor_import:.2f} s",
                f"{min(executor_imports):.2f}-{max(executor_imports):.2f} s over {args.runs}",
            ),
            common.table_row(
                "`import lerobot_ros.server.policy.checkpoint`"
                " (fresh interpreter, torch + LeRobot)",
                f"{server_import:.2f} s",
                f"{min(server_imports):.2f}-{max(server_imports):.2f} s over {args.runs}",
            ),
            common.table_row(
                "server spawn -> `~/get_status` answers (default ACT policy, CPU)",
                f"{statistics.median(startups):.1f} s",
                f"{min(startups):.1f}-{max(startups):.1f} s over {args.runs}",
            ),
            common.table_row(
                "of which: checkpoint load (node log)",
                f"{statistics.median(loads):.2f} s",
                "",
            ),
            common.table_row(
                "of which: warm-up, 1st / 2nd inference (node log)",
                f"{statistics.median(w[0] for w in warmups)}"
                f" / {statistics.median(w[1] for w in warmups)} ms",
                "",
            ),
            common.table_row(
                "GetStatus round trip, client in another process",
                ms(statistics.median(round_trips)),
                f"p95 {ms(common.percentile(round_trips, 0.95))}, max {ms(max(round_trips))}"
                f" over {args.calls}",
            ),
            common.table_row(
                "whole executor handshake (process start -> exit 0)",
                f"{statistics.median(handshakes):.2f} s",
                f"{min(handshakes):.2f}-{max(handshakes):.2f} s over {args.runs}",
            ),
        ]
    )
    body = f"""
| what | median | spread |
|---|---|---|
{rows}

Most of the server's start-up is importing torch and LeRobot (the second row); the robot side,
which imports neither, starts in {executor_import:.2f} s, {server_import / executor_import:.0f}x
faster. Medians of one run.
"""
    write_section("startup_and_handshake", "python -m bench.startup_and_handshake", body)


if __name__ == "__main__":
    main()
