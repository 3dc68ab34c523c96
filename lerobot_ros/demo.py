"""The README's demo command: run the policy server and a robot-side executor.

Today this is the end-to-end smoke of the two nodes: it builds (once) the
default policy, starts policy_server_node on it, runs chunk_executor_node's
start-up handshake as a robot with the matching joints (accepted) and as a
robot with two joints swapped (refused, with the reason), stops the server
with SIGINT, and prints a summary whose last line is JSON. Exit code 0 only
if all of that happened as expected.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from lerobot_ros.processes import run_handshake, spawn_node, stop
from lerobot_ros.sim.default_policy import SO101_JOINT_NAMES, default_checkpoint

SERVER_MODULE = "lerobot_ros.server.node"


def _run_handshake(joint_names: tuple[str, ...], server_namespace: str, timeout_s: float) -> dict:
    exit_code, result, _ = run_handshake(
        {"server_namespace": server_namespace, "joint_names": list(joint_names), "handshake_timeout_s": timeout_s},
        timeout_s=timeout_s + 30,
    )
    return {**result, "exit_code": exit_code}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the server to be ready")
    args = parser.parse_args(argv)
    # A demo must never talk to robots on the network it happens to run on.
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    started = time.monotonic()
    print("demo: preparing the default policy (random weights; built once, then cached)", flush=True)
    checkpoint = default_checkpoint()
    print(f"demo: policy at {checkpoint}", flush=True)
    server_log = tempfile.NamedTemporaryFile("w+", prefix="lerobot_ros_server_", suffix=".log", delete=False)
    server = spawn_node(SERVER_MODULE, {"checkpoint": str(checkpoint)}, log=server_log)
    try:
        print("demo: starting policy_server_node (loading + warm-up)", flush=True)
        matching = _run_handshake(SO101_JOINT_NAMES, "/lerobot", args.timeout)
        print(f"demo: robot with matching joints -> {matching['handshake']}: {matching['reason']}", flush=True)
        swapped = (SO101_JOINT_NAMES[1], SO101_JOINT_NAMES[0], *SO101_JOINT_NAMES[2:])
        refused = _run_handshake(swapped, "/lerobot", 10.0)
        print(f"demo: robot with swapped joints  -> {refused['handshake']}: {refused['reason']}", flush=True)
    finally:
        server_exit = stop(server)
        server_log.close()
    ok = matching.get("handshake") == "accepted" and refused.get("handshake") == "refused" and server_exit == 0
    if not ok:
        with open(server_log.name) as log:
            print(f"demo: FAILED; server log ({server_log.name}) ends:\n{log.read()[-3000:]}", file=sys.stderr, flush=True)
    else:
        os.unlink(server_log.name)
    summary = {
        "demo": "handshake smoke",
        "ok": ok,
        "matching_robot": matching,
        "swapped_joints_robot": refused,
        "server_exit_code": server_exit,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(summary), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
