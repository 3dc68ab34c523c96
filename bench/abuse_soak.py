"""Abuse soak: the sequence of abuse that once crashed every node on a host, repeated for a bounded
time.

Runs the demo's three processes (policy_server_node, sim_robot_node,
chunk_executor_node; the default ACT policy) and, once the executor streams,
repeats cycles of: 200 OpenSession calls for the streaming robot's client id
without its secret (each refused, client id in use), an observation burst
from a session of its own (``python -m bench.flood --attack``, 1000 msg/s for
3 s: throttled, closed, its re-open refused), and a status flood (300 bogus
ServerStatus messages on the server's ``~/status``, which the executor
watches, and 100 GetStatus calls). After every cycle it checks that no
process has exited; at the end it stops them and counts crashes: a process
that exited on its own, or that ended by a signal other than our stop's.

usage: python -m bench.abuse_soak --minutes 5        # a row in docs/reference/reliability.md
                                                      # (section abuse_soak)
       python -m bench.abuse_soak --smoke             # one cycle, a temporary document
Exit code 0 when nothing crashed; the last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import bench.common as common  # noqa: I001 - first: isolation (ROS_DOMAIN_ID, localhost discovery)

SERVER_NS = "/lerobot"
ROBOT = "sim_arm"
OPEN_CALLS = 200
STATUS_MESSAGES = 300
STATUS_CALLS = 100


def _in_batches(
    node, client, make_request, count: int, batch: int = 10, timeout_s: float = 5.0
) -> list:
    """``count`` calls, ``batch`` at a time (a service's request queue keeps 10), each batch waited
    for (bounded)."""
    import rclpy

    answers = []
    for first in range(0, count, batch):
        futures = [client.call_async(make_request()) for _ in range(min(batch, count - first))]
        deadline = time.monotonic() + timeout_s
        while not all(f.done() for f in futures) and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.01)
        answers += [f.result() for f in futures if f.done()]
    return answers


def open_storm(node, client) -> dict:
    """OpenSession calls for the streaming robot's id without its secret: every one must be
    refused."""
    from lerobot_ros.msg import Observation
    from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
    from lerobot_ros.srv import OpenSession

    answered = _in_batches(
        node,
        client,
        lambda: OpenSession.Request(
            client_id=ROBOT,
            schema_version=Observation.CURRENT_SCHEMA_VERSION,
            action_names=list(SO101_JOINT_NAMES),
            state_dim=6,
            camera_names=[FRONT_CAMERA],
            fps=30.0,
        ),
        OPEN_CALLS,
    )
    return {"answered": len(answered), "accepted": sum(r.accepted for r in answered)}


def status_flood(node, publisher, status_client) -> int:
    from lerobot_ros.msg import ServerStatus
    from lerobot_ros.srv import GetStatus

    for index in range(STATUS_MESSAGES):
        publisher.publish(
            ServerStatus(
                instance_id=f"bogus{index}",
                server_namespace=SERVER_NS,
                heartbeat_seq=index,
                ready=bool(index % 2),
                draining=not index % 3,
            )
        )
    return len(_in_batches(node, status_client, GetStatus.Request, STATUS_CALLS))


def run(minutes: float, smoke: bool) -> dict:
    import rclpy

    from bench import outside_load
    from lerobot_ros.launch_plan import demo_plan
    from lerobot_ros.msg import ExecutorStatus, ServerStatus
    from lerobot_ros.processes import start_processes, stop_processes
    from lerobot_ros.protocol.qos import STATUS_QOS
    from lerobot_ros.sim.default_policy import default_checkpoint
    from lerobot_ros.srv import GetStatus, OpenSession

    outside_load.watch()
    directory = Path(tempfile.mkdtemp(prefix="abuse_soak_"))
    plan = demo_plan(
        str(default_checkpoint()), device="cpu", server_parameters={"audit_log": "off"}
    )
    env = dict(os.environ, LEROBOT_ROS_TEST_DOMAIN_ID=os.environ["ROS_DOMAIN_ID"])
    rclpy.init()
    node = rclpy.create_node(f"abuse_soak_{os.getpid()}")
    statuses: list[ExecutorStatus] = []
    node.create_subscription(
        ExecutorStatus, f"/{ROBOT}/chunk_executor/status", statuses.append, 10
    )
    open_client = node.create_client(OpenSession, f"{SERVER_NS}/open_session")
    status_client = node.create_client(GetStatus, f"{SERVER_NS}/get_status")
    status_publisher = node.create_publisher(ServerStatus, f"{SERVER_NS}/status", STATUS_QOS)
    processes = start_processes(plan, directory)
    summary: dict = {
        "cycles": 0,
        "log_dir": str(directory),
        "rmw": os.environ.get("RMW_IMPLEMENTATION", ""),
        "fastdds_shm": "default (on)"
        if "FASTDDS_BUILTIN_TRANSPORTS" not in os.environ
        else os.environ["FASTDDS_BUILTIN_TRANSPORTS"],
        "crashed": {},
        "exit_codes": {},
    }
    try:
        deadline = time.monotonic() + 240
        while (
            not any(s.state_name == "STREAMING" for s in statuses) and time.monotonic() < deadline
        ):
            rclpy.spin_once(node, timeout_sec=0.1)
            if any(p.poll() is not None for _, p in processes):
                break
        summary["streamed"] = any(s.state_name == "STREAMING" for s in statuses)
        started = time.monotonic()
        while summary["streamed"] and (
            summary["cycles"] == 0 or time.monotonic() - started < minutes * 60
        ):
            cycle = summary["cycles"]
            storm = open_storm(node, open_client)
            attacker = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.flood",
                    "--attack",
                    SERVER_NS,
                    f"abuser_{cycle}",
                    "--rate",
                    "1000",
                    "--seconds",
                    "3",
                ],
                cwd=common.REPO,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            answered = status_flood(node, status_publisher, status_client)
            try:
                attacker.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                attacker.kill()
                attacker.communicate()
            summary["cycles"] += 1
            summary.setdefault("opens_accepted", 0)
            summary["opens_accepted"] += storm["accepted"]
            summary["opens_answered"] = summary.get("opens_answered", 0) + storm["answered"]
            summary.setdefault("get_status_answered", 0)
            summary["get_status_answered"] += answered
            exited = {label: p.returncode for label, p in processes if p.poll() is not None}
            if exited:
                summary["crashed"] = exited
                break
            if smoke:
                break
        summary["minutes"] = round((time.monotonic() - started) / 60, 2)
        summary["last_executor_state"] = statuses[-1].state_name if statuses else ""
    finally:
        before_stop = {label for label, p in processes if p.poll() is not None}
        codes = stop_processes(processes)
        node.destroy_node()
        rclpy.try_shutdown()
    summary["exit_codes"] = codes
    # A crash: exited before the stop, or ended by a signal (negative code) other than the stop's
    # own.
    summary["crashed"] = {
        label: code for label, code in codes.items() if label in before_stop or (code or 0) < 0
    }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--smoke", action="store_true", help="one cycle; a temporary document")
    parser.add_argument(
        "--document", type=Path, default=None, help="default docs/reference/reliability.md"
    )
    args = parser.parse_args()
    from bench.report import RELIABILITY_MD, write_section

    if args.document is None:
        args.document = (
            Path(tempfile.mkdtemp(prefix="abuse_smoke_")) / "reliability.md"
            if args.smoke
            else RELIABILITY_MD
        )
    summary = run(0.0 if args.smoke else args.minutes, args.smoke)
    crashes = len(summary["crashed"])
    command = "python -m bench.abuse_soak" + (
        " --smoke" if args.smoke else f" --minutes {args.minutes:g}"
    )
    header = common.table_row(
        "runs",
        "minutes",
        "cycles",
        "crashed processes",
        "streamed",
        "opens answered / accepted (must be 0)",
        "GetStatus answered",
        "transport",
    )
    values = common.table_row(
        1,
        summary.get("minutes", 0),
        summary["cycles"],
        f"{crashes} {summary['crashed'] or ''}",
        summary.get("streamed"),
        f"{summary.get('opens_answered', 0)} / {summary.get('opens_accepted', 0)}",
        summary.get("get_status_answered", 0),
        f"{summary['rmw']}, shared memory {summary['fastdds_shm']}",
    )
    opening = (
        f"Each cycle: {OPEN_CALLS} refused OpenSession calls for the streaming robot's client id,"
    )
    body = f"""{opening} a 3 s observation
burst at 1000 msg/s from a session of its own (closed by the flood rule), {STATUS_MESSAGES} bogus
ServerStatus
messages on the server's `~/status` and {STATUS_CALLS} GetStatus calls; against policy_server_node,
sim_robot_node and
chunk_executor_node as separate processes.

{header}
|---|---|---|---|---|---|---|---|
{values}

Exit codes at the stop: {summary["exit_codes"]}.
"""
    write_section("abuse_soak", command, body, args.document)
    print(json.dumps(summary))
    return (
        0 if crashes == 0 and summary.get("streamed") and not summary.get("opens_accepted") else 1
    )


if __name__ == "__main__":
    sys.exit(main())
