"""The demo as a small fleet: several policy server replicas, several simulated arms, one server
killed mid-run.

Starts ``--servers`` replicas of one policy (/gpu<i>/lerobot, all on this
machine's device) and ``--robots`` simulated arms with their executors, each
executor listing every replica in ``server_namespaces``, or with
``--discovery`` finding them on the ROS graph (wiring:
``lerobot_ros.launch_plan.fleet_plan``, the same as ``launch/fleet.launch.py``).
Once every robot streams, ``--kill-server-after`` seconds later it kills the
replica serving the most robots with SIGKILL (or SIGTERM with ``--drain``),
prints each robot's replica, moves and why, and ends after ``--duration``.
The last line is JSON.

Invariant: exit code 0 only if every robot streamed at the end and every
robot that was on the killed replica moved to another, so a fleet that
survived by luck (the victim served nobody) or stalled is never a pass.

usage: python -m lerobot_ros.fleet_demo [--servers 2] [--robots 3] [--kill-server-after 10]
           [--drain] [--discovery]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from lerobot_ros.launch_plan import fleet_plan
from lerobot_ros.policy_names import checkpoint_or_default
from lerobot_ros.processes import start_processes, stop_processes
from lerobot_ros.recording.evaluate import STREAMING_STATES


def run(args) -> int:
    import rclpy

    from lerobot_ros.msg import ExecutorStatus

    output_dir = Path(args.output_dir or tempfile.mkdtemp(prefix="lerobot_ros_fleet_demo_"))
    output_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = checkpoint_or_default(args.checkpoint, args.policy)
    # Everything starts at once: the robots wait for the replicas as long as the demo does.
    plan = fleet_plan(
        checkpoint,
        servers=args.servers,
        robots=args.robots,
        device=args.device,
        server_parameters={"audit_log": "off"},
        discovery=args.discovery,
        executor_parameters={"handshake_timeout_s": args.startup_timeout},
    )
    executors = [node for node in plan.nodes if node.executable == "chunk_executor_node"]
    print(
        f"fleet demo: {args.servers} replicas of {checkpoint}, {args.robots} simulated arms; logs "
        f"in {output_dir}",
        flush=True,
    )
    rclpy.init()
    node = rclpy.create_node("lerobot_ros_fleet_demo_monitor")
    latest: dict[str, ExecutorStatus] = {}
    for executor in executors:
        node.create_subscription(
            ExecutorStatus,
            f"{executor.namespace}/{executor.name}/status",
            lambda msg, robot=executor.namespace: latest.__setitem__(robot, msg),
            10,
        )
    processes = start_processes(plan, output_dir)
    # start_processes keeps the plan's order: each server's process by the namespace it answers on.
    server_process = {
        f"{node.namespace}/{node.name}": process
        for node, (_, process) in zip(plan.nodes, processes, strict=False)
        if node.executable == "policy_server_node"
    }
    victim, victim_label, victim_robots, killed_at = "", "", [], None
    deadline, end_at, last_print = time.monotonic() + args.startup_timeout, None, 0.0
    try:
        while True:
            rclpy.spin_once(node, timeout_sec=0.05)
            now = time.monotonic()
            exited = [
                label
                for label, process in processes
                if process.poll() is not None and label != victim_label
            ]
            if exited:
                print(
                    f"fleet demo: {exited} exited early; see the logs in {output_dir}", flush=True
                )
                break
            streaming = len(latest) == len(executors) and all(
                s.state_name in STREAMING_STATES for s in latest.values()
            )
            if end_at is None:
                if streaming:
                    end_at = now + args.duration
                    kill_at = now + args.kill_server_after
                    print(
                        "fleet demo: every robot streams; killing a replica in "
                        f"{args.kill_server_after:g} s",
                        flush=True,
                    )
                elif now > deadline:
                    print(
                        f"fleet demo: not every robot streamed within {args.startup_timeout:g} s",
                        flush=True,
                    )
                    break
            elif killed_at is None and now >= kill_at:
                served = Counter(s.server_namespace for s in latest.values())
                victim = served.most_common(1)[0][0]
                victim_robots = [
                    robot for robot, s in latest.items() if s.server_namespace == victim
                ]
                server_process[victim].send_signal(
                    signal.SIGTERM if args.drain else signal.SIGKILL
                )
                killed_at = now
                print(
                    f"fleet demo: {'SIGTERM' if args.drain else 'kill -9'} of {victim}, serving "
                    f"{victim_robots}",
                    flush=True,
                )
            elif now >= end_at:
                break
            if latest and now - last_print >= 2.0:
                last_print = now
                print(
                    "  "
                    + "  ".join(
                        f"{robot.strip('/')}: {s.state_name} on {s.server_namespace} "
                        f"(moves {s.replica_moves}, starved {s.starvation_ticks})"
                        for robot, s in sorted(latest.items())
                    ),
                    flush=True,
                )
    except KeyboardInterrupt:
        print("\nfleet demo: interrupted", flush=True)
    finally:
        stop_processes(processes)
        node.destroy_node()
        rclpy.try_shutdown()
    robots = {
        robot.strip("/"): {
            "state": s.state_name,
            "replica": s.server_namespace,
            "moves": s.replica_moves,
            "last_move": s.last_move_reason,
            "starvation_ticks": s.starvation_ticks,
        }
        for robot, s in sorted(latest.items())
    }
    moved = all(
        latest[robot].server_namespace != victim and latest[robot].replica_moves >= 1
        for robot in victim_robots
    )
    ok = (
        killed_at is not None
        and len(latest) == len(executors)
        and moved
        and all(s.state_name in STREAMING_STATES for s in latest.values())
    )
    for robot, figures in robots.items():
        print(
            f"fleet demo: {robot} ends {figures['state']} on {figures['replica']} after "
            f"{figures['moves']} move(s)"
            + (f": {figures['last_move']}" if figures["last_move"] else ""),
            flush=True,
        )
    print(
        json.dumps(
            {
                "ok": ok,
                "killed": victim,
                "killed_served": [r.strip("/") for r in victim_robots],
                "robots": robots,
            }
        ),
        flush=True,
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--servers", type=int, default=2, help="policy server replicas (default 2)"
    )
    parser.add_argument("--robots", type=int, default=3, help="simulated arms (default 3)")
    parser.add_argument(
        "--kill-server-after",
        type=float,
        default=10.0,
        help="seconds after every robot streams to kill the busiest replica (default 10)",
    )
    parser.add_argument("--drain", action="store_true", help="SIGTERM (drain) instead of kill -9")
    parser.add_argument(
        "--discovery",
        action="store_true",
        help="robots find the replicas on the ROS graph (server_namespaces [auto]) instead of a "
        "list",
    )
    parser.add_argument(
        "--duration", type=float, default=25.0, help="seconds to run once every robot streams"
    )
    parser.add_argument("--policy", choices=("act", "smolvla"), default="act")
    parser.add_argument("--checkpoint", default="", help="policy to serve; overrides --policy")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--startup-timeout", type=float, default=240.0)
    parser.add_argument("--output-dir", default="")
    args = parser.parse_args(argv)
    if args.kill_server_after >= args.duration:
        parser.error(
            f"--kill-server-after ({args.kill_server_after:g}) must be below --duration "
            f"({args.duration:g})"
        )
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
