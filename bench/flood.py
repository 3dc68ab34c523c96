"""Flood: legitimate robots' chunk rate while another session floods its own observation topic.

One policy_server_node (the default ACT policy) serves two legitimate robots
(separate processes, each asking at ``--robot-hz`` with one request in
flight) while a third process, pinned to one core with ``taskset``, opens its
own session and publishes ``--rate`` observations a second on it: forged
MACs, replayed seqs, wrong epochs and validly signed ones holding NaN, in
turn. The server's flood rule throttles it and closes its session; the
attacker keeps publishing (to a topic nobody reads any more) and tries to
re-open (refused, backoff). Reported: each robot's chunks/s as a share of its
own baseline in the same run (before the flood), while the flooding session
is open, and after it was closed; CPU used by processes outside the run
before and during; and where the time of one refused observation goes
(deserialisation, cheap checks, MAC, validation), measured in this process.

usage: python -m bench.flood                 # writes the "flood" section of
                                             # docs/reference/reliability.md
       python -m bench.flood --smoke          # seconds, a temporary document
Agents (used by the benchmark and by test/reliability/test_flood.py):
       python -m bench.flood --attack NAMESPACE CLIENT_ID --rate 2000 --seconds 8
       python -m bench.flood --robot NAMESPACE CLIENT_ID --hz 10 --seconds 20
each prints JSON lines on stdout. The agents import nothing of bench.common:
they inherit the caller's ROS_DOMAIN_ID.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

STATE_DIM = 6


# ------------------------------------------------------------------ agents


def _open_session(node, namespace: str, client_id: str, timeout_s: float = 20.0):
    from lerobot_ros.msg import Observation
    from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
    from lerobot_ros.srv import OpenSession

    client = node.create_client(OpenSession, f"{namespace}/open_session")
    if not client.wait_for_service(timeout_sec=timeout_s):
        raise RuntimeError(f"{namespace}/open_session did not appear within {timeout_s} s")
    request = OpenSession.Request(
        client_id=client_id,
        schema_version=Observation.CURRENT_SCHEMA_VERSION,
        action_names=list(SO101_JOINT_NAMES),
        state_dim=STATE_DIM,
        camera_names=[FRONT_CAMERA],
        fps=30.0,
    )
    import rclpy

    future = client.call_async(request)
    rclpy.spin_until_future_complete(node, future, timeout_sec=timeout_s)
    if not future.done():
        raise RuntimeError(f"{namespace}/open_session did not answer within {timeout_s} s")
    return future.result()


def _observation(session_id: str, client_id: str, seq: int, state=None):
    import numpy as np

    from lerobot_ros.protocol.wire import images
    from lerobot_ros.protocol.wire.data_plane import (
        OutgoingObservation,
        RequestId,
        observation_to_msg,
    )
    from lerobot_ros.sim.so101 import FRONT_CAMERA

    state = np.zeros(STATE_DIM, np.float32) if state is None else state
    rgb = np.full((96, 128, 3), 90, np.uint8)
    request = RequestId(session_id, client_id, seq, 0, 0, time.monotonic_ns())
    return observation_to_msg(
        OutgoingObservation(
            request, "", state, {FRONT_CAMERA: images.rgb_to_compressed(rgb, 90)}, {}
        )
    )


def _wait_matched(node, publisher, timeout_s: float = 10.0) -> bool:
    import rclpy

    deadline = time.monotonic() + timeout_s
    while publisher.get_subscription_count() == 0 and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    return publisher.get_subscription_count() > 0


def attack(namespace: str, client_id: str, rate: float, seconds: float) -> int:
    """Open a session, then flood its observation topic; report the closure and a re-open."""
    import array

    import numpy as np
    import rclpy

    from lerobot_ros.msg import Observation
    from lerobot_ros.protocol.qos import OBSERVATION_QOS
    from lerobot_ros.protocol.wire.data_plane import integrity

    rclpy.init()
    node = rclpy.create_node(f"flood_attacker_{os.getpid()}")
    try:
        opened = _open_session(node, namespace, client_id)
        if not opened.accepted:
            print(json.dumps({"event": "refused", "message": opened.message}), flush=True)
            return 1
        key = integrity.session_key(opened.session_secret)
        publisher = node.create_publisher(Observation, opened.observation_topic, OBSERVATION_QOS)
        if not _wait_matched(node, publisher):
            print(json.dumps({"event": "not_matched"}), flush=True)
            return 1
        template = _observation(opened.session_id, client_id, 1)
        valid = _observation(opened.session_id, client_id, 1)
        integrity.sign(valid, key)
        publisher.publish(valid)  # one admitted observation fixes epoch 0 and seq 1
        print(
            json.dumps(
                {"event": "opened", "session_id": opened.session_id, "t": time.monotonic()}
            ),
            flush=True,
        )
        nan_state, zero_state = (
            np.full(STATE_DIM, np.nan, np.float32),
            np.zeros(STATE_DIM, np.float32),
        )
        sent, closed_at, seq, start = 0, None, 1, time.monotonic()
        period = 1.0 / rate
        while time.monotonic() - start < seconds:
            seq += 1
            kind = sent % 4
            msg = template
            msg.seq, msg.epoch = seq, 0
            if kind == 0:  # forged: a fresh seq, a random MAC
                msg.mac = array.array("B", os.urandom(32))
            elif kind == 1:  # replayed seq
                msg.seq = 1
                msg.mac = valid.mac
            elif kind == 2:  # another epoch
                msg.epoch = 7
                msg.mac = array.array("B", os.urandom(32))
            else:  # validly signed, NaN state: admitted, superseding a waiting one (or rejected)
                msg.state = nan_state
                integrity.sign(msg, key)
            publisher.publish(msg)
            msg.state = zero_state
            sent += 1
            if closed_at is None and sent % 200 == 0 and publisher.get_subscription_count() == 0:
                closed_at = time.monotonic()
                print(json.dumps({"event": "closed", "t": closed_at, "sent": sent}), flush=True)
                reopen = _open_session(node, namespace, client_id)  # at once: within the backoff
                print(
                    json.dumps(
                        {
                            "event": "reopen",
                            "accepted": reopen.accepted,
                            "refusal": reopen.refusal,
                            "message": reopen.message,
                        }
                    ),
                    flush=True,
                )
            delay = start + sent * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        elapsed = time.monotonic() - start
        print(
            json.dumps(
                {"event": "done", "sent": sent, "rate": sent / elapsed, "closed_at": closed_at}
            ),
            flush=True,
        )
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def robot(
    namespace: str, client_id: str, hz: float, seconds: float, request_timeout_s: float = 1.0
) -> int:
    """A legitimate robot: one request in flight, at most ``hz`` a second; one JSON line per
    chunk."""
    import rclpy

    from lerobot_ros.msg import ActionChunk, Observation
    from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS
    from lerobot_ros.protocol.wire.data_plane import integrity

    rclpy.init()
    node = rclpy.create_node(f"flood_robot_{client_id}_{os.getpid()}")
    try:
        opened = _open_session(node, namespace, client_id)
        if not opened.accepted:
            print(json.dumps({"event": "refused", "message": opened.message}), flush=True)
            return 1
        key = integrity.session_key(opened.session_secret)
        received: list = []
        node.create_subscription(
            ActionChunk, opened.action_chunk_topic, received.append, ACTION_CHUNK_QOS
        )
        publisher = node.create_publisher(Observation, opened.observation_topic, OBSERVATION_QOS)
        if not _wait_matched(node, publisher):
            print(json.dumps({"event": "not_matched"}), flush=True)
            return 1
        print(json.dumps({"event": "opened", "t": time.monotonic()}), flush=True)
        start, seq = time.monotonic(), 0
        while time.monotonic() - start < seconds:
            seq += 1
            sent_at = time.monotonic()
            msg = _observation(opened.session_id, client_id, seq)
            integrity.sign(msg, key)
            publisher.publish(msg)
            deadline = sent_at + request_timeout_s
            answer = None
            while answer is None and time.monotonic() < deadline:
                rclpy.spin_once(node, timeout_sec=0.01)
                answer = next(
                    (c for c in received if c.seq == seq and integrity.verify(c, key) is None),
                    None,
                )
            received.clear()
            if answer is not None:
                print(
                    json.dumps(
                        {
                            "event": "chunk",
                            "t": time.monotonic(),
                            "seq": seq,
                            "status": answer.status,
                            "latency_ms": (time.monotonic() - sent_at) * 1000,
                        }
                    ),
                    flush=True,
                )
            wait = sent_at + 1.0 / hz - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        return 0
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def agent_command(
    mode: str, namespace: str, client_id: str, *options: str, core: int | None = None
) -> list[str]:
    command = [sys.executable, "-m", "bench.flood", f"--{mode}", namespace, client_id, *options]
    return (["taskset", "-c", str(core)] if core is not None else []) + command


# ------------------------------------------------------------ refusal cost


def refusal_cost(repeats: int = 2000) -> dict:
    """Microseconds per refused observation, by stage, for a typical executor observation (one
    96x128 JPEG)."""
    from rclpy.serialization import deserialize_message, serialize_message

    from lerobot_ros.msg import Observation
    from lerobot_ros.protocol.wire.data_plane import RequestLimits, integrity, observation_from_msg
    from lerobot_ros.server.sessions.registry import Session, SessionRegistry

    registry = SessionRegistry()
    session = Session("arm", task="", fps=30.0, rtc_enabled=False, opened_at=0.0)
    registry.open(session)
    first = _observation(session.session_id, "arm", 5)
    integrity.sign(first, session.key)
    assert registry.admit_observation("arm", first, 1.0) is None
    replayed = _observation(session.session_id, "arm", 5)
    integrity.sign(replayed, session.key)
    forged = _observation(session.session_id, "arm", 6)
    forged.mac = [0] * 32
    wire = serialize_message(forged)

    def per_call_us(action) -> float:
        for _ in range(50):
            action()
        started = time.perf_counter()
        for _ in range(repeats):
            action()
        return (time.perf_counter() - started) / repeats * 1e6

    limits = RequestLimits()
    return {
        "message_bytes": len(wire),
        "deserialize_us": per_call_us(lambda: deserialize_message(wire, Observation)),
        "refused_by_seq_us": per_call_us(lambda: registry.admit_observation("arm", replayed, 2.0)),
        "refused_by_mac_us": per_call_us(lambda: registry.admit_observation("arm", forged, 2.0)),
        "mac_alone_us": per_call_us(lambda: integrity.verify(forged, session.key)),
        "validation_decode_us": per_call_us(lambda: observation_from_msg(forged, limits)),
    }


# --------------------------------------------------------------- benchmark


def other_cpu_cores(own_pids: set[int], seconds: float) -> float:
    """Cores used by processes outside ``own_pids`` (and their children) over ``seconds``."""

    def totals() -> tuple[float, float]:
        fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
        busy_all = sum(int(v) for i, v in enumerate(fields[:8]) if i not in (3, 4))
        own = 0
        for pid in list(own_pids):
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                own += int(stat[11]) + int(stat[12]) + int(stat[13]) + int(stat[14])
            except OSError:
                pass
        return busy_all, own

    ticks = os.sysconf("SC_CLK_TCK")
    all0, own0 = totals()
    time.sleep(seconds)
    all1, own1 = totals()
    return max(0.0, ((all1 - all0) - (own1 - own0)) / ticks / seconds)


def rate_between(chunks: list[float], start: float, end: float) -> float:
    inside = [t for t in chunks if start <= t <= end]
    return len(inside) / (end - start) if end > start else float("nan")


def run(args) -> dict:
    import bench.common as common  # isolation first: ROS_DOMAIN_ID, localhost discovery
    from bench import outside_load
    from lerobot_ros.sim.default_policy import default_checkpoint

    outside_load.watch()
    directory = (
        Path(args.document).parent
        if args.smoke
        else Path(__import__("tempfile").mkdtemp(prefix="flood_"))
    )
    env = dict(os.environ, LEROBOT_ROS_TEST_DOMAIN_ID=os.environ["ROS_DOMAIN_ID"])
    server = common.start_server(
        directory, "lerobot_flood", {"checkpoint": str(default_checkpoint()), "max_sessions": 4}
    )
    namespace = "/lerobot_flood"
    processes = [server]
    try:
        robots = {}
        for name in ("robot_a", "robot_b"):
            log = (directory / f"{name}.jsonl").open("w")
            robots[name] = subprocess.Popen(
                agent_command(
                    "robot",
                    namespace,
                    name,
                    "--hz",
                    str(args.robot_hz),
                    "--seconds",
                    str(args.baseline_s + args.flood_s + 3),
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=common.REPO,
            )
            processes.append(robots[name])
        time.sleep(args.baseline_s)
        own = {p.pid for p in processes}
        before_other = other_cpu_cores(own, 2.0)
        baseline_end = time.monotonic()
        attacker_log = directory / "attacker.jsonl"
        with attacker_log.open("w") as log:
            attacker = subprocess.Popen(
                agent_command(
                    "attack",
                    namespace,
                    "attacker",
                    "--rate",
                    str(args.rate),
                    "--seconds",
                    str(args.flood_s),
                    core=args.attacker_core,
                ),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=common.REPO,
            )
        processes.append(attacker)
        during_other = other_cpu_cores(own | {attacker.pid}, 2.0)
        attacker.wait(timeout=args.flood_s + 60)
        for process in robots.values():
            process.wait(timeout=60)
        events = [
            json.loads(line)
            for line in attacker_log.read_text().splitlines()
            if line.startswith("{")
        ]
        opened = next((e["t"] for e in events if e["event"] == "opened"), None)
        closed = next((e["t"] for e in events if e["event"] == "closed"), None)
        done = next((e for e in events if e["event"] == "done"), {})
        reopen = next((e for e in events if e["event"] == "reopen"), {})
        flood_end = opened + args.flood_s if opened else None
        shares = {}
        for name in robots:
            chunks = [
                json.loads(line)["t"]
                for line in (directory / f"{name}.jsonl").read_text().splitlines()
                if '"chunk"' in line
            ]
            baseline = rate_between(chunks, baseline_end - args.baseline_s + 2.0, baseline_end)
            before = rate_between(chunks, opened, closed) if opened and closed else float("nan")
            after = rate_between(chunks, closed + 0.5, flood_end) if closed else float("nan")
            shares[name] = {
                "baseline_chunks_per_s": round(baseline, 2),
                "before_closure": round(before / baseline, 3),
                "after_closure": round(after / baseline, 3),
            }
        return {
            "robots": shares,
            "attacker_rate": round(done.get("rate", float("nan")), 0),
            "closed_after_s": round(closed - opened, 2) if opened and closed else None,
            "reopen_refusal": reopen.get("refusal"),
            "reopen_message": reopen.get("message", "")[:160],
            "other_cores_before": round(before_other, 2),
            "other_cores_during": round(during_other, 2),
            "load_average": round(os.getloadavg()[0], 2),
            "refusal_cost_us": refusal_cost(200 if args.smoke else 2000),
        }
    finally:
        common.stop_all(processes)


def report(result: dict, args) -> str:
    from bench.report import table_row

    cost = result["refusal_cost_us"]
    rows = "\n".join(
        f"| {name} | {r['baseline_chunks_per_s']:.2f} | {r['before_closure']:.0%} | "
        f"{r['after_closure']:.0%} |"
        for name, r in result["robots"].items()
    )
    quiet = result["other_cores_before"] < 0.3 and result["other_cores_during"] < 0.3
    judgement = (
        "quiet enough to judge (< 0.3 cores)"
        if quiet
        else "**disturbed: above 0.3 cores, do not judge this run**"
    )
    header = table_row(
        "robot",
        "baseline chunks/s",
        "share while the flooding session is open",
        "share after it was closed",
    )
    opening = f"Two legitimate robots ask at {args.robot_hz:g} Hz (one request in flight)"
    return f"""{opening} while a third session,
pinned to core {args.attacker_core} with `taskset`, floods its own observation topic at
{result["attacker_rate"]:.0f} msg/s
(forged MACs, replayed seqs, wrong epochs, validly signed NaN states, in turn). Shares are of each
robot's own
baseline in the same run (the {args.baseline_s:g} s before the flood). Goals: >= 80 % before the
flooding session is
closed, >= 95 % after.

{header}
|---|---|---|---|
{rows}

The flooding session was closed {result["closed_after_s"]} s after it opened;
its re-open was refused with code {result["reopen_refusal"]} ("{result["reopen_message"]}..."). CPU
used by processes outside this run:
{result["other_cores_before"]} cores before, {result["other_cores_during"]} during (load average
{result["load_average"]});
{judgement}.

Where the time of one refused observation goes (one 96x128 JPEG, {cost["message_bytes"]} bytes on
the wire; this
process, microseconds): deserialisation by rclpy {cost["deserialize_us"]:.1f}; refused by the cheap
checks (replayed
seq) {cost["refused_by_seq_us"]:.1f}; refused by the MAC {cost["refused_by_mac_us"]:.1f} (the MAC
alone
{cost["mac_alone_us"]:.1f}); for comparison, the worker's validation and decode it would have
reached
{cost["validation_decode_us"]:.1f}. Over the budget (`flood_refusals_per_s`) an observation costs
only its
deserialisation and a dictionary look-up.
"""


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attack", nargs=2, metavar=("NAMESPACE", "CLIENT_ID"))
    parser.add_argument("--robot", nargs=2, metavar=("NAMESPACE", "CLIENT_ID"))
    parser.add_argument(
        "--rate", type=float, default=2000.0, help="attacker: observations per second"
    )
    parser.add_argument(
        "--hz", type=float, default=10.0, help="robot agent: requests per second at most"
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="agents: how long")
    parser.add_argument("--robot-hz", type=float, default=10.0)
    parser.add_argument("--baseline-s", type=float, default=8.0)
    parser.add_argument("--flood-s", type=float, default=12.0)
    parser.add_argument("--attacker-core", type=int, default=1)
    parser.add_argument("--smoke", action="store_true", help="seconds; a temporary document")
    parser.add_argument(
        "--document", type=Path, default=None, help="default docs/reference/reliability.md"
    )
    args = parser.parse_args()
    if args.attack:
        return attack(*args.attack, args.rate, args.seconds)
    if args.robot:
        return robot(*args.robot, args.hz, args.seconds)
    if args.smoke:
        args.baseline_s, args.flood_s, args.rate = 4.0, 6.0, 500.0
    from bench.report import RELIABILITY_MD, write_section

    if args.document is None:
        args.document = (
            Path(__import__("tempfile").mkdtemp(prefix="flood_smoke_")) / "reliability.md"
            if args.smoke
            else RELIABILITY_MD
        )
    result = run(args)
    command = "python -m bench.flood" + (" --smoke" if args.smoke else "")
    write_section("flood", command, report(result, args), args.document)
    print(json.dumps(result))
    ok = (
        all(not math.isnan(r["before_closure"]) for r in result["robots"].values())
        and result["closed_after_s"] is not None
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
