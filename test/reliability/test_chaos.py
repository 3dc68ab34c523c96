"""Chaos with real processes: a server killed, drained, hung or replaced, an executor killed.

Everything runs as separate OS processes over Fast DDS: policy_server_node on
a real ACT checkpoint, the stand-in robot driver (lerobot_ros/standins/robot_io.py,
which records every command it receives with its monotonic receive time) and
chunk_executor_node between them. Faults are real signals (``kill -9`` is
``SIGKILL``). The robot's joints stand still at ``POSITIONS``, so the
``hold`` fallback is recognisable in the recorded commands and anything else
is a policy action.

Server start-up (importing torch) dominates the run time on small machines,
so one story test walks one pair of executors through kill -9, restart,
SIGTERM drain, a killed executor and a model swap against one server name;
the hung worker needs a server of its own. Each fault records its figures
with ``reliability_log.record`` for docs/reference/reliability.md.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rclpy.action import ActionClient

from lerobot_ros.action import RunPolicy
from lerobot_ros.msg import ActionChunk, ExecutorStatus, ServerStatus
from lerobot_ros.processes import stop
from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS
from lerobot_ros.protocol.wire import control_plane
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from support.executor_processes import Executor, Robot, is_hold, trigger
from support.goals import WAIT_S, GoalRun
from support.jsonl import read_jsonl
from support.reliability_log import record
from support.ros import spin_until
from support.servers import start_server

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_chaos")

CHAOS_SERVER = "lerobot_chaos"
# Above buffer_time_s + a chunk (1.2 + 1.67 s) plus the drained model's 1 s latency.
MAX_ACTION_AGE_S = 4.0
IDLE_TIMEOUT_S = 3.0
SERVER_GC_PERIOD_S = 1.0  # policy_server_node collects garbage once a second
# The server to be drained runs a slower model (every inference 1 s longer, as a
# big policy would take) so the test can SIGTERM it with a request inside.
DRAINED_MODEL_DELAY_S = 1.0
# Sent this long before SIGTERM, a request has reached the inference worker even
# on a loaded machine, and is still inside it.
IN_FLIGHT_AFTER_S = 0.35
# Command timestamps are taken where the driver receives them; one DDS hop and
# one control tick is the slack on every time bound below.
DELIVERY_SLACK_S = 0.15
# A restart imports torch: 5 s on a quiet machine, 40 s seen on a shared, overloaded 2-core one.
SERVER_START_TIMEOUT_S = 120.0
HEARTBEAT_PERIOD_S = 0.5  # the server's default heartbeat_period_s
CATEGORY = "fault"


def chaos_parameters(robot: Robot, server: str = CHAOS_SERVER, **overrides) -> dict:
    """Small timeouts so faults are noticed in seconds; offline budget above a server restart."""
    return robot.executor_parameters(
        **{
            "server_namespace": f"/{server}",
            "buffer_time_s": 1.2,
            # One 50-step chunk at 30 Hz is merged every 1.67 s in steady state.
            "degraded_after_s": 2.5,
            "max_action_age_s": MAX_ACTION_AGE_S,
            # two clients share a slowed model on a loaded machine: answers take seconds
            "request_timeout_s": 4.0,
            "heartbeat_timeout_s": 2.0,
            "max_offline_s": 2 * SERVER_START_TIMEOUT_S,  # never spent by a restart
            "reconnect_backoff_initial_s": 0.5,
            "reconnect_backoff_max_s": 1.0,
            "handshake_timeout_s": 4.0,
            "fallback": "hold",
            **overrides,
        }
    )


class Heartbeats:
    """The server's ~/status as the test process receives it (survives server restarts)."""

    def __init__(self, ros_node, server: str) -> None:
        self.node, self.beats = ros_node, []
        self.subscription = ros_node.create_subscription(
            ServerStatus,
            f"/{server}/status",
            lambda msg: self.beats.append((time.monotonic(), msg)),
            50,
        )

    @property
    def last(self) -> ServerStatus | None:
        return self.beats[-1][1] if self.beats else None

    def instances(self) -> set[str]:
        return {msg.instance_id for _, msg in self.beats}

    def ready_at(self, known: set[str], timeout_s: float) -> float:
        """When a server instance not in ``known`` became ready (test process clock).

        Its services answering is no proof: a killed server's entities stay in
        the Fast DDS graph until their lease expires. The heartbeat timer is
        created as the server becomes ready and first fires one period later.
        """
        new = lambda: next((at for at, m in self.beats if m.instance_id not in known), None)  # noqa: E731
        assert spin_until(self.node, lambda: new() is not None, timeout_s), (
            "no heartbeat of a new server instance"
        )
        return new() - HEARTBEAT_PERIOD_S

    def close(self) -> None:
        self.node.destroy_subscription(self.subscription)


class StoryRobot(Robot):
    """robot_io.py alive for the whole story (Robot's driver ends after 240 s;
    four server starts can take longer on a busy machine)."""

    def __init__(self, directory: Path, prefix: str, run_s: float = 900.0) -> None:
        self.prefix, self.out = prefix, directory / f"{prefix.strip('/')}_commands.jsonl"
        self.out.touch()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lerobot_ros.standins.robot_io",
                "--prefix",
                prefix,
                "--out",
                str(self.out),
                "--transport",
                "compressed",
                "--run-s",
                str(run_s),
                "--command",
                f"forward_command:{prefix}/commands",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )


def commands_between(robot: Robot, start: float, end: float = float("inf")) -> list[dict]:
    return [c for c in robot.commands() if start < c["t"] < end]


def first_policy_command(robot: Robot, after: float) -> dict | None:
    return next((c for c in robot.commands() if c["t"] > after and not is_hold(c["values"])), None)


def first_time(executor: Executor, state: str, after: float) -> float | None:
    return next(
        (at for at, msg in executor.statuses if at >= after and msg.state_name == state), None
    )


def server_endpoints(ros_node, server: str, client_id: str) -> int:
    """The server's own subscription and publisher on a client's data plane topics."""
    observation = f"/{server}/clients/{client_id}/observation"
    chunks = f"/{server}/clients/{client_id}/action_chunk"
    ours = lambda infos: sum(1 for i in infos if i.node_name == server)  # noqa: E731
    return ours(ros_node.get_subscriptions_info_by_topic(observation)) + ours(
        ros_node.get_publishers_info_by_topic(chunks)
    )


def audit_lines(server, client_id: str) -> list[dict]:
    if not server.audit.exists():
        return []
    lines = read_jsonl(server.audit)
    return [line for line in lines if line["client"] == client_id]


def kill_server(server) -> float:
    server.process.send_signal(signal.SIGKILL)
    server.process.wait()
    return time.monotonic()


# ---------------------------------------------------------------------------


def check_kill9_and_restart(
    server, server_start, pairs, heartbeats: Heartbeats, ros_node
) -> object:
    """kill -9 mid-episode: queued fresh actions play out, then only the fallback; restart:
    streaming again."""
    for _, executor in pairs:
        executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 60, "streaming"
        )
    assert spin_until(ros_node, lambda: heartbeats.last is not None, 5), "no heartbeat"
    known = heartbeats.instances()
    before = {executor.name: executor.status for _, executor in pairs}
    killed_at = kill_server(server)
    stale_after = killed_at + MAX_ACTION_AGE_S + DELIVERY_SLACK_S
    for _, executor in pairs:
        executor.wait(lambda s: s.state_name == "RECONNECTING", 20, "RECONNECTING after kill -9")
    # Stay down past the staleness bound, so every queued action has gone stale.
    spin_until(ros_node, lambda: False, max(0.0, stale_after + 0.5 - time.monotonic()))
    # A long idle timeout: the executor paused during the drain keeps its session.
    server = server_start("restarted", inject_delay_s=DRAINED_MODEL_DELAY_S, idle_timeout_s=60.0)
    ready_at = heartbeats.ready_at(known, SERVER_START_TIMEOUT_S)
    figures = []
    for robot, executor in pairs:
        # A new epoch: under load a slow first answer may cost one more re-handshake, so ">
        # before".
        status = executor.wait(
            lambda s, executor=executor: (
                s.state_name == "STREAMING"
                and s.epoch > before[executor.name].epoch
                and s.chunks_merged > before[executor.name].chunks_merged
            ),
            60,
            "STREAMING with a chunk of a new epoch",
        )
        since = max(ready_at, stale_after)
        assert spin_until(
            ros_node,
            lambda robot=robot, since=since: first_policy_command(robot, since) is not None,
            10,
        ), f"{executor.name}: no policy action after the restart"
        recovered = first_policy_command(robot, since)
        outage = commands_between(robot, killed_at, recovered["t"])
        drained = [c for c in outage if not is_hold(c["values"])]
        stale_policy = [c for c in drained if c["t"] > stale_after]
        holds = [c for c in outage if is_hold(c["values"])]
        first_hold = holds[0]["t"] if holds else None
        states = executor.states_since(killed_at)
        figures.append(
            {
                "executor": executor.name,
                "fresh_actions_played_after_kill": len(drained) - len(stale_policy),
                "stale_actions_executed": len(stale_policy),
                "s_to_fallback": round(first_hold - killed_at, 3) if first_hold else None,
                "fallback_ticks_during_outage": len(holds),
                "s_to_reconnecting": round(
                    first_time(executor, "RECONNECTING", killed_at) - killed_at, 3
                ),
                "ticks_to_recovery": len(commands_between(robot, ready_at, recovered["t"])),
                "s_to_recovery": round(recovered["t"] - ready_at, 3),
                "outage_ticks": len(outage),
                "s_outage": round(recovered["t"] - killed_at, 3),
                "states": sorted(states),
            }
        )
        assert not stale_policy, (
            f"{executor.name} executed {len(stale_policy)} actions older than max_action_age_s"
        )
        assert holds and first_hold - killed_at <= MAX_ACTION_AGE_S + DELIVERY_SLACK_S, figures[-1]
        assert all(is_hold(c["values"]) for c in commands_between(robot, stale_after, ready_at)), (
            "only the fallback"
        )
        assert "RECONNECTING" in states and "DEAD" not in states, states
        assert status.fallback_ticks > before[executor.name].fallback_ticks
    survived = sum(1 for f in figures if f["stale_actions_executed"] == 0)
    record(
        CATEGORY,
        "server kill -9 mid-episode, then restarted (same model)",
        tried=len(figures),
        survived=survived,
        lost=sum(f["stale_actions_executed"] for f in figures),
        ticks_to_recovery=[f["ticks_to_recovery"] for f in figures],
        s_to_recovery=[f["s_to_recovery"] for f in figures],
        outage_ticks=[f["outage_ticks"] for f in figures],
        s_outage=[f["s_outage"] for f in figures],
        s_to_fallback=[f["s_to_fallback"] for f in figures],
        s_to_reconnecting=[f["s_to_reconnecting"] for f in figures],
        fallback_ticks=[f["fallback_ticks_during_outage"] for f in figures],
        fresh_actions_played_after_kill=[f["fresh_actions_played_after_kill"] for f in figures],
    )
    return server


def check_sigterm_drain(
    server, server_start, pairs, heartbeats: Heartbeats, ros_node, subscriptions: list
) -> object:
    """SIGTERM with a request in flight: its chunk is delivered and merged; clients move on without
    a DEAD."""
    (robot, executor), (_, other) = pairs
    drained = server
    chunks: list[ActionChunk] = []
    # Kept until the test ends: destroying entities of the test node mid-test
    # has crashed rclpy here (a segfault in the next create_client).
    subscriptions.append(
        ros_node.create_subscription(
            ActionChunk,
            f"/{CHAOS_SERVER}/clients/{robot.prefix.strip('/')}/action_chunk",
            chunks.append,
            ACTION_CHUNK_QOS,
        )
    )
    executor.wait(lambda s: s.state_name == "STREAMING", 30, "streaming before the drain")
    known = heartbeats.instances()
    # The epochs this executor had with the server about to drain end at these.
    drained_epochs = {each.name: each.status.epoch for _, each in pairs}

    # The other executor holds still meanwhile: with its request ahead in the
    # worker, this one's would wait in a mailbox instead of being in flight.
    assert trigger(ros_node, f"/{other.name}/pause").success
    other.wait(lambda s: s.paused, 5, "paused")
    # its last request is answered
    spin_until(ros_node, lambda: False, DRAINED_MODEL_DELAY_S + 0.5)

    def just_sent() -> tuple[ExecutorStatus, float] | None:
        # A status stamped less than 0.15 s ago that counts one more request.
        (_, previous), (_, latest) = executor.statuses[-2:]
        stamp = latest.header.stamp.sec + latest.header.stamp.nanosec * 1e-9
        age = time.time() - stamp
        return (
            (latest, time.monotonic() - age)
            if age < 0.15 and latest.requests_sent > previous.requests_sent
            else None
        )

    assert spin_until(ros_node, lambda: just_sent() is not None, 15), "no request caught in flight"
    in_flight, counted_at = just_sent()
    merged_before, dropped_before = in_flight.chunks_merged, in_flight.chunks_dropped
    spin_until(ros_node, lambda: False, counted_at + IN_FLIGHT_AFTER_S - time.monotonic())
    server.process.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    # One request in flight at a time, and the other executor paused: both counts are exact.
    sent_at_sigterm = {
        executor.name: in_flight.requests_sent,
        other.name: other.status.requests_sent,
    }
    assert spin_until(ros_node, lambda: server.process.poll() is not None, 40), (
        "the drain did not end"
    )
    assert server.process.returncode == 0, server.log_text()[-3000:]
    # The executor numbers its requests 1, 2, ...: the latest one's seq is the count.
    answer = lambda: next((c for c in chunks if c.seq == in_flight.requests_sent), None)  # noqa: E731
    assert spin_until(ros_node, lambda: answer() is not None, 5), (
        f"in-flight request seq {in_flight.requests_sent} not answered"
    )
    chunk = answer()
    assert chunk.status == ActionChunk.STATUS_OK, chunk.error
    sent_at = chunk.sent_monotonic_ns / 1e9
    server_busy_s = sum(
        control_plane.seconds_from_duration(d)
        for d in (chunk.queue_wait, chunk.preprocess, chunk.inference)
    )
    assert sent_at < signalled_at < sent_at + server_busy_s, (
        "the request was not in flight when SIGTERM arrived"
    )
    merged = executor.wait(
        lambda s: s.chunks_merged > merged_before, 5, "the drained chunk merged"
    )
    assert merged.chunks_dropped == dropped_before, "the drained chunk was dropped, not merged"
    assert "drained after" in server.log_text()
    assert trigger(ros_node, f"/{other.name}/resume").success

    for _, each in pairs:
        each.wait(
            lambda s: s.state_name == "RECONNECTING",
            20,
            "RECONNECTING once the drained server is gone",
        )
    server = server_start("fresh")
    ready_at = heartbeats.ready_at(known, SERVER_START_TIMEOUT_S)
    # Actions of the drained server's last chunks stay fresh (and are executed) for
    # MAX_ACTION_AGE_S.
    since = max(ready_at, signalled_at + MAX_ACTION_AGE_S + DELIVERY_SLACK_S)
    recovery = []
    for each_robot, each in pairs:
        each.wait(
            lambda s, each=each: (
                s.state_name == "STREAMING" and s.epoch > drained_epochs[each.name]
            ),
            60,
            "STREAMING on the fresh server",
        )
        assert spin_until(
            ros_node,
            lambda each_robot=each_robot: first_policy_command(each_robot, since) is not None,
            10,
        )
        recovery.append(
            len(
                commands_between(
                    each_robot, ready_at, first_policy_command(each_robot, since)["t"]
                )
            )
        )
    dead = [each.name for _, each in pairs if "DEAD" in each.states_since(signalled_at)]
    # Every request sent before SIGTERM, from the first one the drained server
    # audited on, must be in its audit log (answered, or superseded and counted
    # in the next line): a request's seq is the executor's request count.
    # Requests sent after SIGTERM reached a server going or gone: counted, not judged.
    unaudited, sent_after_sigterm = [], []
    for each_robot, each in pairs:
        lines = [
            line
            for line in audit_lines(drained, each_robot.prefix.strip("/"))
            if line["seq"] <= sent_at_sigterm[each.name]
        ]
        first_seq = min(line["seq"] for line in lines)
        expected = sent_at_sigterm[each.name] - first_seq + 1
        unaudited.append(
            expected
            - len(lines)
            - sum(line["superseded"] for line in lines if line["seq"] > first_seq)
        )
        last_sent = max(
            m.requests_sent for _, m in each.statuses if m.epoch <= drained_epochs[each.name]
        )
        sent_after_sigterm.append(last_sent - sent_at_sigterm[each.name])
    record(
        CATEGORY,
        "server SIGTERM drain with a request in flight, then a fresh server",
        tried=len(pairs),
        survived=len(pairs) - len(dead),
        lost=len(dead) + sum(unaudited),
        in_flight_chunk_delivered=True,
        in_flight_chunk_merged=True,
        server_exit_code=0,
        s_in_flight_before_sigterm=round(signalled_at - sent_at, 3),
        s_sigterm_to_chunk_done=round(sent_at + server_busy_s - signalled_at, 3),
        ticks_to_recovery=recovery,
        requests_sent_before_sigterm_unaudited=unaudited,
        requests_sent_after_sigterm_unanswered=sent_after_sigterm,
    )
    assert not dead, f"DEAD after a drain: {dead}"
    assert unaudited == [0, 0], (
        f"requests sent before SIGTERM missing from the audit log: {unaudited}"
    )
    return server


def check_executor_killed(server, pairs, heartbeats: Heartbeats, ros_node) -> None:
    """kill -9 one executor: the server collects its session and topics within the idle timeout;
    the other streams on."""
    (_, survivor), (victim_robot, victim) = pairs
    victim_id = victim_robot.prefix.strip("/")
    for _, executor in pairs:
        executor.wait(lambda s: s.state_name == "STREAMING", 30, "streaming")
    assert spin_until(
        ros_node, lambda: server_endpoints(ros_node, CHAOS_SERVER, victim_id) == 2, 10
    )
    assert spin_until(
        ros_node, lambda: heartbeats.last is not None and heartbeats.last.active_sessions == 2, 5
    )
    survivor_before = survivor.status
    victim.process.send_signal(signal.SIGKILL)
    victim.process.wait()
    killed_at = time.monotonic()
    bound_s = IDLE_TIMEOUT_S + SERVER_GC_PERIOD_S + 2.0
    collected = spin_until(
        ros_node,
        lambda: (
            server_endpoints(ros_node, CHAOS_SERVER, victim_id) == 0
            and heartbeats.last.active_sessions == 1
        ),
        bound_s + 5,
    )
    gc_s = time.monotonic() - killed_at
    log = server.log_text()
    closed = re.findall(rf"session \w+ of {victim_id} closed: (.*)", log)
    survivor.spin(1.0)
    after = survivor.status
    survivor_states = survivor.states_since(killed_at)
    survivor_ok = (
        after.chunks_merged > survivor_before.chunks_merged
        and after.request_timeouts == survivor_before.request_timeouts
        and survivor_states <= {"STREAMING", "DEGRADED"}
    )
    record(
        CATEGORY,
        "executor kill -9 mid-session (server collects it, serves the other)",
        tried=1,
        survived=int(collected and gc_s <= bound_s and survivor_ok),
        lost=0 if collected else 1,
        s_to_collect=round(gc_s, 2),
        idle_timeout_s=IDLE_TIMEOUT_S,
        collected_because=closed[-1] if closed else "",
        other_executor_chunks_merged=after.chunks_merged - survivor_before.chunks_merged,
        other_executor_request_timeouts=after.request_timeouts - survivor_before.request_timeouts,
    )
    assert collected, f"session and topics of {victim_id} still there {gc_s:.1f} s after kill -9"
    assert gc_s <= bound_s, f"collected after {gc_s:.1f} s, bound {bound_s} s"
    assert closed and "no observation" in closed[-1], closed
    assert survivor_ok, (survivor_states, survivor_before, after)


def check_model_swap(
    server, server_start, robot: Robot, executor: Executor, heartbeats: Heartbeats, ros_node
) -> None:
    """The server comes back with another action order: DEAD, and nothing from it is ever
    executed."""
    known = heartbeats.instances()
    killed_at = kill_server(server)
    stale_after = killed_at + MAX_ACTION_AGE_S + DELIVERY_SLACK_S
    server = server_start("permuted", permuted=True)
    try:
        heartbeats.ready_at(known, SERVER_START_TIMEOUT_S)
        dead = executor.wait(lambda s: s.state_name == "DEAD", 20, "DEAD")
        dead_at = time.monotonic()
        executor.spin(1.0)
        assert "different model" in dead.reason and "action names" in dead.reason, dead.reason
        not_fallback = [
            c for c in commands_between(robot, stale_after) if not is_hold(c["values"])
        ]
        after_dead = commands_between(robot, dead_at + DELIVERY_SLACK_S)
        served = audit_lines(server, robot.prefix.strip("/"))
        record(
            CATEGORY,
            "server restarted with another model (action order swapped)",
            tried=1,
            survived=int(not not_fallback and not after_dead and not served),
            lost=len(not_fallback) + len(served),
            actions_executed_from_new_model=len(not_fallback),
            requests_reaching_new_model=len(served),
            commands_after_dead=len(after_dead),
            reason=dead.reason,
        )
        assert not not_fallback, (
            f"{len(not_fallback)} commands other than the fallback after the swap"
        )
        assert not after_dead, "DEAD commands nothing"
        assert not served, "no request may reach the other model"
        assert executor.process.poll() is None and executor.status.state_name == "DEAD", (
            "DEAD keeps reporting"
        )
    finally:
        stop(server.process)


@pytest.fixture(scope="module")
def permuted_checkpoint(tmp_path_factory) -> Path:
    """The same arm with two joints swapped in the policy's action order."""
    from lerobot_ros.sim.default_policy import build_act_checkpoint

    permuted = (SO101_JOINT_NAMES[1], SO101_JOINT_NAMES[0], *SO101_JOINT_NAMES[2:])
    return build_act_checkpoint(tmp_path_factory.mktemp("act_permuted"), joint_names=permuted)


def test_server_killed_drained_replaced_and_an_executor_killed(
    act_checkpoint, permuted_checkpoint, tmp_path, ros_node, launched
):
    started = []

    def server_start(
        run: str,
        permuted: bool = False,
        inject_delay_s: float = 0.0,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
    ):
        directory = tmp_path / run  # each run its own log and audit file
        directory.mkdir()
        server = start_server(
            permuted_checkpoint if permuted else act_checkpoint,
            directory,
            ros_node,
            node_name=CHAOS_SERVER,
            session_idle_timeout_s=idle_timeout_s,
            inject_delay_s=inject_delay_s,
            warmup_inferences=1,
        )
        started.append(server)
        return server

    robots = [StoryRobot(tmp_path, f"/{name}") for name in ("chaos_a", "chaos_b")]
    heartbeats = Heartbeats(ros_node, CHAOS_SERVER)
    subscriptions = []
    try:
        server = server_start("first")
        pairs = [
            (robot, launched.executor(f"exec_{robot.prefix.strip('/')}", chaos_parameters(robot)))
            for robot in robots
        ]
        server = check_kill9_and_restart(server, server_start, pairs, heartbeats, ros_node)
        server = check_sigterm_drain(
            server, server_start, pairs, heartbeats, ros_node, subscriptions
        )
        check_executor_killed(server, pairs, heartbeats, ros_node)
        check_model_swap(server, server_start, *pairs[0], heartbeats, ros_node)
    finally:
        heartbeats.close()
        for subscription in subscriptions:
            ros_node.destroy_subscription(subscription)
        for server in started:
            stop(server.process)
        for robot in robots:
            robot.stop()


def check_goal_fails_once_the_server_is_gone(server, executor: Executor, ros_node) -> None:
    """A RunPolicy goal sent after kill -9 of the server ends "failed", with the reason, not a
    silent hold."""
    client = ActionClient(ros_node, RunPolicy, f"/{executor.name}/run_policy")
    try:
        assert client.wait_for_server(timeout_sec=WAIT_S)
        kill_server(server)
        run = GoalRun(client, ros_node, task="reach the cube", max_duration_s=60.0)
        assert run.handle.accepted
        result = run.result(timeout_s=30)
        assert result.termination == RunPolicy.Result.TERMINATION_FAILED, (
            result.termination,
            result.reason,
        )
        assert (
            "no session with the server" in result.reason and "/lerobot_hung" in result.reason
        ), result.reason
        assert result.chunks_merged == 0 and result.duration_s < 30
    finally:
        client.destroy()


def test_hung_worker_is_request_timeouts_then_reconnecting_not_a_silent_stall(
    act_checkpoint, tmp_path, ros_node, launched
):
    """A server that opens sessions and beats its heartbeat but never answers a request."""
    server = start_server(
        act_checkpoint,
        tmp_path,
        ros_node,
        node_name="lerobot_hung",
        inject_delay_s=3600.0,
        warmup_inferences=0,
    )
    try:
        robot = launched("/hung_arm", commands=[("forward_command", "/hung_arm/commands")])
        request_timeout_s = 1.0
        executor = launched.executor(
            "exec_hung",
            chaos_parameters(robot, server="lerobot_hung", request_timeout_s=request_timeout_s),
        )
        first = executor.wait(lambda s: s.requests_sent >= 1, 30, "a first request")
        first_at = time.monotonic()
        reconnecting = executor.wait(
            lambda s: s.state_name == "RECONNECTING", 2 * request_timeout_s + 5, "RECONNECTING"
        )
        reconnect_s = time.monotonic() - first_at
        # it keeps trying: re-handshakes, requests, timeouts; never a silent stall
        executor.spin(5.0)
        last = executor.status
        policy = [c for c in robot.commands() if not is_hold(c["values"])]
        reopened = executor.log.read_text().count("re-handshake: accepted")
        record(
            CATEGORY,
            "hung inference worker (sessions open, heartbeat on, no answer)",
            tried=1,
            survived=int(not policy and last.chunks_merged == 0 and reopened >= 1),
            lost=len(policy),
            s_first_request_to_reconnecting=round(reconnect_s, 2),
            request_timeout_s=request_timeout_s,
            request_timeouts=last.request_timeouts,
            re_handshakes_in_5_s=reopened,
            fallback_ticks=last.fallback_ticks,
            reason=reconnecting.reason,
        )
        assert "request timeouts in a row" in reconnecting.reason, reconnecting.reason
        assert reconnect_s <= 2 * request_timeout_s + 3.0, reconnect_s
        assert first.chunks_merged == last.chunks_merged == 0
        assert last.request_timeouts >= 3 and reopened >= 1, (last.request_timeouts, reopened)
        assert last.commands_published > 0 and not policy, (
            "only the fallback while nothing is answered"
        )
        assert "DEAD" not in executor.states_since(0.0)
        check_goal_fails_once_the_server_is_gone(server, executor, ros_node)
    finally:
        # A drain would wait for the hung request: there is nothing to save here.
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()
