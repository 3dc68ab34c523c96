"""A hostile process against a streaming robot: session ownership and message integrity, across
real processes.

One chunk_executor_node (the victim) streams from the suite's shared
policy_server_node; a hostile process with its own rclpy node
(``test/processes/hostile_client.py``, none of the executor's code) tries to
replace, close and reset the victim's session, replays and forges
observations on its topic, forges chunks answering its requests, and squats
the server's capacity; meanwhile a second policy_server_node is started on
the same namespace. Every attempt must be refused or dropped with its reason,
the victim must keep streaming (chunks/s before vs during), and nothing forged
may reach its commands. One server and one robot serve every case, so the
suite pays for them once.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.srv import OpenSession
from support.executor_processes import Executor, Robot
from support.jsonl import read_jsonl
from support.paths import PROCESSES, REPO
from support.reliability_log import record
from support.servers import ServerProcess

CATEGORY = "hostile process: session ownership and message integrity"
VICTIM = "hostile_victim"
# The victim keeps at least this share of its chunk rate while attacked (the
# hostile process shares the 2 cores; a stolen or stalled session gives 0).
RATE_BOUND = 0.4


def merged_rate(executor: Executor, start: float, end: float) -> float:
    inside = [(at, msg.chunks_merged) for at, msg in executor.statuses if start <= at <= end]
    (t0, first), (t1, last) = inside[0], inside[-1]
    return (last - first) / (t1 - t0)


def second_server(policy_server, checkpoint, directory) -> ServerProcess:
    """Another policy_server_node on the shared server's namespace (started, not waited for)."""
    log = directory / "second_server.log"
    with log.open("w") as sink:
        process = spawn_node(
            "lerobot_ros.server.node",
            {"checkpoint": str(checkpoint), "http_port": 0},
            log=sink,
            node_name=policy_server.namespace.strip("/"),
        )
    return ServerProcess(
        process, log, directory / "none", directory / "none", 0, policy_server.namespace
    )


@pytest.mark.serial
def test_a_hostile_process_cannot_take_over_disturb_or_feed_a_streaming_robot(
    policy_server, act_checkpoint, ros_node, tmp_path
):
    robot = Robot(tmp_path, f"/{VICTIM}", commands=[("forward_command", f"/{VICTIM}/commands")])
    executor = Executor(ros_node, tmp_path, "exec_hostile_victim", robot.executor_parameters())
    duplicate = None
    cases: dict[str, tuple[bool, str]] = {}
    try:
        streaming = executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 3, 60, "streaming"
        )
        session_id = streaming.session_id  # public: any process reads the victim's ~/status
        executor.spin(3.0)
        before_end = time.monotonic()
        before = merged_rate(executor, before_end - 3.0, before_end)
        baseline = executor.status
        duplicate = second_server(policy_server, act_checkpoint, tmp_path)
        attack_start = time.monotonic()
        hostile = subprocess.Popen(
            [
                sys.executable,
                str(PROCESSES / "hostile_client.py"),
                policy_server.namespace,
                VICTIM,
                session_id,
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        while hostile.poll() is None and time.monotonic() < deadline:
            executor.spin(0.5)
        if hostile.poll() is None:
            hostile.kill()
        out, err = hostile.communicate(timeout=10)
        assert hostile.returncode == 0, f"hostile process failed:\n{err[-3000:]}"
        attempts = {line["attempt"]: line for line in map(json.loads, out.splitlines())}
        attack_end = time.monotonic()
        during = merged_rate(executor, attack_start, attack_end)
        last = executor.status

        # Services: refused, with a reason that names neither the victim's secret nor its session
        # id.
        for name in ("replace", "replace_with_guessed_secret"):
            answer = attempts[name]
            cases[name] = (
                not answer["accepted"]
                and answer["refusal"] == OpenSession.Response.REFUSAL_CLIENT_ID_IN_USE
                and "is in use by a session that is streaming" in answer["message"]
                and not answer["secret_leaked"]
                and session_id not in answer["message"],
                answer["message"],
            )
        for name in ("close", "close_with_guessed_secret", "reset"):
            answer = attempts[name]
            cases[name] = (
                not answer["success"] and "that this secret opens" in answer["message"],
                answer["message"],
            )

        # Topics: the server's audit log says why each hostile observation was refused on arrival.
        refused = [
            line
            for line in read_jsonl(policy_server.audit, f'"{VICTIM}"')
            if line["outcome"] == "refused_on_arrival" and line["wall_time"] >= time.time() - 200
        ]
        reasons = {line["seq"]: line["error"] for line in refused}
        replayed, older = attempts["replay_observation"]["seqs"]
        cases["replay_observation"] = (
            "replays or reorders" in reasons.get(replayed, "")
            and "replays or reorders" in reasons.get(older, ""),
            f"{reasons.get(replayed)} / {reasons.get(older)}",
        )
        altered, unsigned = attempts["forge_observation"]["seqs"]
        cases["forge_observation"] = (
            "MAC does not verify" in reasons.get(altered, "")
            and "0-byte MAC" in reasons.get(unsigned, ""),
            f"{reasons.get(altered)} / {reasons.get(unsigned)}",
        )

        # Forged chunks: each dropped by the victim, none executed.
        forged = attempts["forge_chunks"]["sent"]
        dropped = last.chunks_dropped - baseline.chunks_dropped
        commands = [c for c in robot.commands(f"/{VICTIM}/commands") if c["t"] >= attack_start]
        values = np.asarray([c["values"] for c in commands])
        executed_forged = (
            int(np.isclose(values, 1.5, atol=0.05).all(axis=1).sum()) if len(values) else 0
        )
        cases["forge_chunks"] = (
            forged > 0 and dropped >= forged and executed_forged == 0,
            f"{forged} forged, chunks_dropped +{dropped}, commands at the forged pose: "
            f"{executed_forged}",
        )

        # Capacity: the refusal says when a slot frees; squatted slots free within the idle bound
        # of the first open.
        squat = attempts["squat"]
        cases["squat"] = (
            squat["opened"] >= 1
            and "a slot frees in" in squat["message"]
            and squat["reopened"]
            and squat["collected_after_s"] < 5.0
            and squat["active_after"] <= squat["active_full"] - squat["opened"],
            f"{squat['opened']} squatted; refusal: {squat['message'][:160]}; "
            f"collected after {squat['collected_after_s']} s",
        )

        # A second server on the namespace refuses to start, naming the live one.
        exit_code = duplicate.process.wait(timeout=180)
        text = duplicate.log_text()
        cases["second_server"] = (
            exit_code == 1 and "already serves /lerobot" in text,
            text.strip().splitlines()[-1][:200],
        )

        # The victim kept its session and its stream.
        cases["victim_kept_streaming"] = (
            last.session_id == session_id
            and last.epoch == baseline.epoch
            and during >= RATE_BOUND * before
            and last.state_name in ("STREAMING", "DEGRADED")
            and not last.other_server_instance,
            f"{before:.2f} chunks/s before, {during:.2f} during; session kept: "
            f"{last.session_id == session_id}",
        )
        survived = sum(ok for ok, _ in cases.values())
        record(
            CATEGORY,
            "replace, close, reset, replay, forge, squat, second server vs a streaming robot",
            tried=len(cases),
            survived=survived,
            lost=len(cases) - survived + executed_forged,
            cases={
                name: ("refused/dropped" if ok else "LOST") + f": {why}"
                for name, (ok, why) in cases.items()
            },
            victim_chunks_per_s_before=round(before, 2),
            victim_chunks_per_s_during=round(during, 2),
            forged_chunks=forged,
            forged_chunks_executed=executed_forged,
        )
        assert all(ok for ok, _ in cases.values()), {
            name: why for name, (ok, why) in cases.items() if not ok
        }
    finally:
        if duplicate is not None and duplicate.process.poll() is None:
            stop(duplicate.process)
        executor.stop()
        robot.stop()
