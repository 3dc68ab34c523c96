"""Replica discovery (discovery.py) and the concurrent status round (status_round.py), with a fake
fleet.

The graph is given as snapshots (topic, types) of topics that have a
publisher, as the server link takes them; placement runs through the real
handshake, core and worker against a fake fleet whose replicas come and go
and whose GetStatus answers take real time.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.fleet.discovery import (
    HEARTBEAT_TYPE,
    FleetSpec,
    ReplicaDiscovery,
    fleet_problem,
    fleet_spec,
    heartbeat_topics,
    servers_in,
)
from lerobot_ros.executor.fleet.replicas import NONE_FOUND
from lerobot_ros.executor.fleet.status_round import ask_all
from lerobot_ros.executor.requests.network_worker import NetworkWorker
from lerobot_ros.executor.session.handshake import handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView, SessionGrant
from lerobot_ros.node_shell.parameters import InvalidParameters
from lerobot_ros.protocol.status import ExecutorState
from support.executor_harness import CAPABILITIES, Clock, chunk, counts, feed, settings

ROBOT = RobotDeclaration(CAPABILITIES.action_names, (CAPABILITIES.cameras[0].name,), 3)
EXECUTOR_STATUS = "lerobot_ros/msg/ExecutorStatus"


def heartbeat(namespace: str) -> tuple[str, list[str]]:
    return f"{namespace}/status", [HEARTBEAT_TYPE]


# ------------------------------------------------------------ the spec


@pytest.mark.parametrize(
    "values, spec",
    [
        (["auto"], FleetSpec(prefix="/")),
        (["auto:/fleet_a"], FleetSpec(prefix="/fleet_a")),
        (["auto:/site/fleet_a"], FleetSpec(prefix="/site/fleet_a")),
        (["/gpu0/lerobot", "/gpu1/lerobot"], FleetSpec(listed=("/gpu0/lerobot", "/gpu1/lerobot"))),
    ],
)
def test_the_valid_forms_of_server_namespaces(values, spec):
    assert fleet_problem("server_namespaces", values) is None
    assert fleet_spec(values) == spec


@pytest.mark.parametrize(
    "values, expected",
    [
        (["auto", "/gpu0"], "cannot be combined with other entries"),
        (["auto:/a", "auto:/b"], "cannot be combined"),
        (["auto:"], "must be an absolute namespace"),
        (["auto:fleet"], "must be an absolute namespace"),
        (["auto:/fleet/"], "no trailing slash"),
        (["auto:/0fleet"], "must be an absolute namespace"),
        (["gpu0"], "expected absolute names"),
        (["AUTO"], "expected absolute names"),
    ],
)
def test_a_bad_server_namespaces_says_what_was_expected(values, expected):
    problem = fleet_problem("server_namespaces", values)
    assert expected in problem and "[auto:/prefix]" in problem, problem


def test_the_settings_refuse_a_bad_fleet_and_treat_auto_as_a_fleet():
    with pytest.raises(InvalidParameters, match="cannot be combined"):
        settings(server_namespaces=["auto", "/gpu0"])
    with pytest.raises(InvalidParameters, match="discovery_period_s"):
        settings(server_namespaces=["auto"], discovery_period_s=0.0)
    discovered = settings(server_namespaces=["auto:/fleet_a"])
    assert discovered.fleet.discovers and discovered.replicas == () and discovered.is_fleet
    assert discovered.failsafe.move_at_once, "a lost replica of a discovered fleet is left at once"
    listed = settings(server_namespaces=["/gpu0"])
    assert listed.replicas == ("/gpu0",) and not listed.is_fleet and not listed.fleet.discovers
    assert settings().replicas == ("/lerobot",), "no list: server_namespace alone, as always"


# ------------------------------------------------------------ the graph


def test_only_heartbeat_publishers_of_the_fleet_are_replicas_in_name_order():
    graph = [
        heartbeat("/gpu1/lerobot"),
        heartbeat("/gpu0/lerobot"),
        # an executor's own status: another type
        (
            "/robot/chunk_executor/status",
            [EXECUTOR_STATUS],
        ),
        ("/gpu2/lerobot/get_status", [HEARTBEAT_TYPE]),  # the type, not the heartbeat's name
        ("/rosout", ["rcl_interfaces/msg/Log"]),
    ]
    assert servers_in(graph, FleetSpec(prefix="/")) == ("/gpu0/lerobot", "/gpu1/lerobot")
    assert heartbeat_topics(graph, FleetSpec(prefix="/gpu1")) == ["/gpu1/lerobot/status"]


def test_a_prefix_keeps_namespaces_under_it_segment_by_segment():
    graph = [
        heartbeat(name)
        for name in ("/fleet_a", "/fleet_a/gpu0/lerobot", "/fleet_ab/lerobot", "/other/lerobot")
    ]
    assert servers_in(graph, FleetSpec(prefix="/fleet_a")) == ("/fleet_a", "/fleet_a/gpu0/lerobot")
    assert len(servers_in(graph, FleetSpec(prefix="/"))) == 4


def test_discovery_adds_and_removes_replicas_snapshot_by_snapshot():
    discovery = ReplicaDiscovery(FleetSpec(prefix="/"), now_s=0.0)
    assert not discovery.settled(10.0, 0.5), "nothing found yet: no placement can begin"
    change = discovery.update([heartbeat("/b")], now_s=1.0)
    assert change.added == ("/b",) and not change.removed and discovery.replicas == ("/b",)
    assert not discovery.update([heartbeat("/b")], now_s=1.2), "the same graph changes nothing"
    assert not discovery.settled(1.3, 0.5) and discovery.settled(1.6, 0.5), (
        "settled: unchanged for 0.5 s"
    )
    change = discovery.update([heartbeat("/a"), heartbeat("/b"), heartbeat("/c")], now_s=2.0)
    assert change.added == ("/a", "/c") and discovery.replicas == ("/a", "/b", "/c")
    change = discovery.update([heartbeat("/c"), heartbeat("/a")], now_s=3.0)
    assert change.removed == ("/b",) and not change.added and discovery.replicas == ("/a", "/c")
    change = discovery.update([heartbeat("/b"), heartbeat("/a"), heartbeat("/c")], now_s=4.0)
    assert change.added == ("/b",) and discovery.replicas == ("/a", "/b", "/c"), (
        "a replica may come back"
    )
    assert (
        discovery.update([], now_s=5.0).removed == ("/a", "/b", "/c") and discovery.replicas == ()
    )
    with pytest.raises(ValueError, match="auto"):
        ReplicaDiscovery(FleetSpec(listed=("/a",)))


# ------------------------------------------------------------ the status round


def test_a_status_round_asks_everyone_at_once_and_is_bounded_by_one_timeout():
    started: dict[str, float] = {}

    def ask(namespace):
        started[namespace] = time.monotonic()
        if namespace == "/broken":
            raise RuntimeError("service client gone")
        time.sleep(60.0 if namespace == "/hung" else 0.3)
        return f"view of {namespace}"

    names = ["/a", "/hung", "/b", "/broken", "/c"]
    begin = time.monotonic()
    answers = ask_all(ask, names, timeout_s=0.8)
    took = time.monotonic() - begin
    assert [name for name, _ in answers] == names, "answers in the order asked"
    assert dict(answers)["/a"] == "view of /a" and dict(answers)["/c"] == "view of /c"
    assert dict(answers)["/hung"] == "no policy server answered on /hung within 0.8 s"
    assert "RuntimeError: service client gone" in dict(answers)["/broken"]
    assert 0.75 <= took < 1.5, f"one timeout (0.8 s), not the sum; took {took:.2f} s"
    assert max(started.values()) - min(started.values()) < 0.3, "every replica asked at once"
    assert ask_all(ask, [], 1.0) == []


def test_a_status_round_pumps_on_the_calling_thread_while_nothing_else_spins():
    caller, pumped = threading.current_thread(), []
    answered = threading.Event()

    def pump(wait_s):
        assert threading.current_thread() is caller and wait_s <= 0.05
        pumped.append(wait_s)
        if len(pumped) == 3:
            answered.set()  # the "executor" delivers the answers
        time.sleep(wait_s)

    answers = ask_all(
        lambda namespace: answered.wait(2.0) and namespace.upper(), ["/a", "/b"], 2.0, pump=pump
    )
    assert answers == [("/a", "/A"), ("/b", "/B")] and len(pumped) >= 3


# ------------------------------------------------------------ placement over a fleet that changes


class ChangingFleet:
    """Fake replicas that join and leave; every GetStatus answer takes ``delay_s`` (``hung``: never
    comes)."""

    discovers = True

    def __init__(self, core, delay_s=0.0) -> None:
        self.core, self.delay_s = core, delay_s
        self.namespaces: tuple[str, ...] = ()
        self.views: dict[str, ServerView] = {}
        self.hung: set[str] = set()
        self.gone: set[str] = set()
        self.current = ""
        self.discovery_waits: list[float] = []

    def join(self, namespace, active=0):
        self.views[namespace] = ServerView(
            True, f"i{namespace}", CAPABILITIES, active_sessions=active, max_sessions=4
        )
        self.namespaces = tuple(sorted({*self.namespaces, namespace}))

    def get_status(self, namespace, timeout_s):
        if namespace in self.hung or namespace in self.gone:
            time.sleep(60.0 if namespace in self.hung else timeout_s)
            return f"no policy server answered on {namespace} within {timeout_s:g} s"
        time.sleep(self.delay_s)
        return self.views[namespace]

    def get_statuses(self, namespaces, timeout_s):
        return ask_all(
            lambda namespace: self.get_status(namespace, timeout_s), namespaces, timeout_s
        )

    def wait_for_discovery(self, timeout_s):
        self.discovery_waits.append(timeout_s)

    def open_session(self, namespace, timeout_s, check):
        grant = SessionGrant(f"s-{namespace}", False, "/obs", "/chunk", CAPABILITIES)
        problem = check(grant)
        if problem:
            return problem
        self.current = namespace
        return grant

    def send_observation(self, pending):
        actions = np.tile(np.arange(10, dtype=np.float32)[:, None], (1, 3))
        reply = chunk(
            pending.request,
            actions=actions,
            model_fingerprint=CAPABILITIES.model_fingerprint,
            action_names=CAPABILITIES.action_names,
        )
        self.core.offer_chunk(reply, pending.request.sent_monotonic_ns + 20_000_000)
        return None


def changing_fleet(delay_s=0.0, **overrides):
    clock = Clock()
    made = settings(server_namespaces=["auto"], fps=10.0, buffer_time_s=0.25, **overrides)
    core = ExecutorCore(made, clock())
    link = ChangingFleet(core, delay_s)
    return clock, core, link, NetworkWorker(core, link, ROBOT, clock=clock, clock_ns=clock.ns)


def test_a_replica_found_after_start_up_takes_the_robot_at_its_next_move():
    clock, core, link, worker = changing_fleet(heartbeat_timeout_s=1.0)
    link.join("/a")
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.replica == "/a"
    assert link.discovery_waits == [core.settings.handshake_timeout_s], (
        "discovering: wait until it settles"
    )
    feed(core, clock)
    worker.step()
    assert counts(core, clock).chunks_merged == 1
    link.join("/b")  # started after the robot; nothing on the robot changes
    core.replicas_found(link.namespaces)
    assert counts(core, clock).replicas == ("/a", "/b")
    link.gone.add("/a")  # /a is killed: its heartbeat falls silent
    clock.t += 1.1
    core.control_tick(clock())
    assert core.state is ExecutorState.RECONNECTING
    assert (
        worker.step() and core.identity.replica == "/b" and core.state is ExecutorState.STREAMING
    )
    assert counts(core, clock).last_move_reason.startswith("/a -> /b: server heartbeat silent")


def test_discovering_a_start_up_waits_for_a_first_replica_and_nothing_found_says_so():
    clock, core, link, worker = changing_fleet(
        handshake_timeout_s=1.5, replica_status_timeout_s=0.2
    )
    threading.Timer(0.6, link.join, args=("/late",)).start()
    result = handshake(core, link, ROBOT, clock)
    assert result.accepted and core.identity.replica == "/late", result
    clock, core, link, worker = changing_fleet(
        handshake_timeout_s=1.0, replica_status_timeout_s=0.2
    )
    result = handshake(core, link, ROBOT, clock)
    assert not result.accepted and result.reason == NONE_FOUND


def test_concurrent_placement_costs_one_status_timeout_not_the_sum():
    clock, core, link, worker = changing_fleet(delay_s=0.4, replica_status_timeout_s=1.0)
    for name in ("/a", "/b", "/c", "/d", "/e"):
        link.join(name, active=0 if name == "/e" else 1)
    begin = time.monotonic()
    assert handshake(core, link, ROBOT, clock).accepted
    took = time.monotonic() - begin
    assert core.identity.replica == "/e", "the least loaded, ranked over every answer"
    assert took < 1.2, f"five answers of 0.4 s each (2 s one after another) took {took:.2f} s"
    # Two hung replicas (killed, their calls never return) delay the round by one timeout, not two.
    link.hung |= {"/a", "/e"}
    clock.t += 10.0
    begin = time.monotonic()
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.replica == "/b"
    took = time.monotonic() - begin
    assert 1.0 <= took < 1.8, f"bounded by one replica_status_timeout_s (1 s); took {took:.2f} s"
    skipped = counts(core, clock).replicas_skipped
    assert any(line.startswith("/a: no policy server answered") for line in skipped), skipped
