"""A session flooding its own observation topic is throttled and closed while two legitimate robots
keep their rate; why observations were refused on arrival is readable in the server's status; a
robot of the previous schema version is refused naming both versions. Real processes: the suite's
shared policy_server_node, two robot processes and a flooding process (``python -m bench.flood
--robot/--attack``, none of the executor's code).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from lerobot_ros.msg import Observation, ServerStatus
from lerobot_ros.protocol.qos import STATUS_QOS
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.srv import OpenSession
from support.paths import REPO
from support.reliability_log import record
from support.ros import call_service, spin_until

CATEGORY = "flood: a session refused at a sustained rate"
ATTACKER = "flood_attacker"
ROBOTS = ("flood_robot_a", "flood_robot_b")
BASELINE_S, FLOOD_S = 5.0, 8.0
# The robots stream this long past the flood, so the rate after the closure is measured over ~8 s,
# not ~5 (one 1-2 s dip on a loaded 2-core machine took a 5 s window under the bound once in CI).
AFTER_FLOOD_S = 3.0
# Shares of each robot's own baseline rate. The flood, the robots and the server share 2 cores in
# CI, so the bounds are looser than the benchmark's goals (80 % / 95 %,
# docs/reference/reliability.md#flood).
BEFORE_BOUND, AFTER_BOUND = 0.5, 0.75


def agent(mode: str, client_id: str, *options: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "bench.flood", f"--{mode}", "/lerobot", client_id, *options],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def events(process: subprocess.Popen, timeout_s: float) -> list[dict]:
    out, err = process.communicate(timeout=timeout_s)
    assert process.returncode == 0, (
        f"{process.args[3:6]} exited {process.returncode}:\n{err[-3000:]}"
    )
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def rate(times: list[float], start: float, end: float) -> float:
    return sum(start <= t <= end for t in times) / (end - start)


def test_a_previous_schema_version_is_refused_naming_both_versions(policy_server, ros_node):
    request = OpenSession.Request(
        client_id="flood_old_robot",
        schema_version=Observation.CURRENT_SCHEMA_VERSION - 1,
        action_names=list(SO101_JOINT_NAMES),
        state_dim=6,
        camera_names=[FRONT_CAMERA],
        fps=30.0,
    )
    reply = call_service(
        ros_node, OpenSession, f"{policy_server.namespace}/open_session", request, 20.0
    )
    old, new = Observation.CURRENT_SCHEMA_VERSION - 1, Observation.CURRENT_SCHEMA_VERSION
    assert not reply.accepted and reply.refusal == OpenSession.Response.REFUSAL_SCHEMA_VERSION
    assert (
        f"schema version {old}" in reply.message
        and f"this server schema version {new}" in reply.message
    ), reply.message


@pytest.mark.serial
def test_a_flooding_session_is_closed_with_its_reason_while_two_robots_keep_their_rate(
    policy_server, ros_node
):
    statuses: list[ServerStatus] = []
    subscription = ros_node.create_subscription(
        ServerStatus, f"{policy_server.namespace}/status", statuses.append, STATUS_QOS
    )
    # The robots' margin covers the attacker's start-up (imports), so they outlast the measured
    # window.
    robots = {
        name: agent(
            "robot", name, "--hz", "10", "--seconds", str(BASELINE_S + FLOOD_S + AFTER_FLOOD_S + 8)
        )
        for name in ROBOTS
    }
    try:
        # the robots start (imports) and stream
        spin_until(ros_node, lambda: False, BASELINE_S + 3.0)
        attacker = agent("attack", ATTACKER, "--rate", "1000", "--seconds", str(FLOOD_S))
        spin_until(ros_node, lambda: attacker.poll() is not None, FLOOD_S + 30)
        attack = {e["event"]: e for e in events(attacker, 30)}
        spin_until(ros_node, lambda: all(p.poll() is not None for p in robots.values()), 30)
        chunks = {
            name: [e["t"] for e in events(process, 30) if e["event"] == "chunk"]
            for name, process in robots.items()
        }
    finally:
        for process in robots.values():
            if process.poll() is None:
                process.kill()
        ros_node.destroy_subscription(subscription)

    opened, done = attack["opened"]["t"], attack["done"]
    closed = attack.get("closed", {}).get("t")
    cases = {
        "closed": (
            closed is not None and closed - opened < 6.0,
            f"closed {None if closed is None else round(closed - opened, 2)} s after opening",
        )
    }
    reopen = attack.get(
        "reopen", {"accepted": None, "refusal": None, "message": "no re-open tried"}
    )
    cases["reopen_refused"] = (
        reopen["accepted"] is False
        and reopen["refusal"] == OpenSession.Response.REFUSAL_BACKOFF
        and "closed for flooding" in reopen["message"],
        reopen["message"][:200],
    )
    reasons = [
        dict(zip(s.refused_client_ids, s.refused_last_reasons, strict=False)).get(ATTACKER, "")
        for s in statuses
    ]
    counts = [
        dict(zip(s.refused_client_ids, s.refused_on_arrival, strict=False)).get(ATTACKER, 0)
        for s in statuses
    ]
    kinds = {reason.split(":")[0] for reason in reasons if reason}
    cases["reasons_in_status"] = (
        bool(kinds & {"mac", "seq", "epoch"})
        and any(r.startswith("session closed: flood") for r in reasons)
        and max(counts) > 20,
        f"kinds seen {sorted(kinds)}, most refused {max(counts)}",
    )
    # A secret is 32 hex digits and a MAC 64; a reason may name "the session secret", never carry
    # one.
    leaked = [
        r for s in statuses for r in s.refused_last_reasons if re.search(r"[0-9a-fA-F]{32}", r)
    ]
    cases["no_secret_in_status"] = (
        not leaked,
        f"{len(leaked)} reasons carry a secret or MAC: {leaked[:1]}",
    )
    shares = {}
    for name, times in chunks.items():
        baseline = rate(times, opened - BASELINE_S + 1.0, opened)
        before = rate(times, opened, closed) if closed and closed - opened > 0.5 else baseline
        after = rate(times, (closed or opened) + 0.5, opened + FLOOD_S + AFTER_FLOOD_S)
        shares[name] = (
            round(before / baseline, 2),
            round(after / baseline, 2),
            round(baseline, 2),
        )
        cases[f"{name}_kept_rate"] = (
            before >= BEFORE_BOUND * baseline and after >= AFTER_BOUND * baseline,
            f"baseline {baseline:.2f} chunks/s, {before / baseline:.0%} while the flood "
            f"session was open, {after / baseline:.0%} after it was closed",
        )
    survived = sum(ok for ok, _ in cases.values())
    record(
        CATEGORY,
        "a session flooding its own topic at 1000 msg/s beside two robots at 10 Hz",
        tried=len(cases),
        survived=survived,
        lost=len(cases) - survived,
        cases={name: ("ok" if ok else "LOST") + f": {why}" for name, (ok, why) in cases.items()},
        attacker_rate=round(done["rate"]),
        robot_shares=shares,
    )
    assert all(ok for ok, _ in cases.values()), {
        name: why for name, (ok, why) in cases.items() if not ok
    }
