"""Replica placement (replicas.choose) and moves through the real handshake, core and worker.

The network boundary is a fake fleet (one FakeLink-like server per
namespace); everything behind it is the product's code on a hand-stepped clock.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.fleet.replicas import choose
from lerobot_ros.executor.fleet.status_round import ask_all
from lerobot_ros.executor.requests.answer_rules import ValidatedModel
from lerobot_ros.executor.requests.network_worker import NetworkWorker
from lerobot_ros.executor.session.handshake import handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView, SessionGrant
from lerobot_ros.protocol.status import ExecutorState
from support.executor_harness import (
    CAMERA,
    CAPABILITIES,
    JOINTS,
    Clock,
    chunk,
    counts,
    feed,
    heartbeat,
    settings,
)

ROBOT = RobotDeclaration(JOINTS, (CAMERA,), 3)
OTHER_MODEL = dataclasses.replace(CAPABILITIES, model_fingerprint="e" * 16)


def view(
    active=0,
    max_sessions=4,
    ready=True,
    draining=False,
    pending=0,
    capabilities=CAPABILITIES,
    instance="i",
):
    return ServerView(
        ready,
        instance,
        capabilities,
        draining=draining,
        active_sessions=active,
        max_sessions=max_sessions,
        pending_requests=pending,
    )


def names(placement):
    return [namespace for namespace, _ in placement.candidates]


def test_least_loaded_first_ties_in_list_order_and_the_left_replica_last():
    views = [
        ("/a", view(active=2)),
        ("/b", view(active=1)),
        ("/c", view(active=1)),
        ("/d", view(active=1, pending=3)),
    ]
    assert names(choose(views, ROBOT, None)) == ["/b", "/c", "/d", "/a"]
    assert names(choose(views, ROBOT, None, current="/b")) == ["/c", "/d", "/a", "/b"]
    # Capacity differs per GPU: the fraction of it in use counts.
    assert names(
        choose(
            [("/small", view(active=1, max_sessions=2)), ("/big", view(active=2, max_sessions=8))],
            ROBOT,
            None,
        )
    ) == ["/big", "/small"]


def test_unanswered_not_ready_draining_and_full_replicas_are_skipped_with_the_reason():
    views = [
        ("/gone", "no policy server answered on /gone/get_status within 1 s"),
        ("/loading", view(ready=False)),
        ("/leaving", view(draining=True)),
        ("/full", view(active=4)),
        ("/ok", view(active=3)),
    ]
    placement = choose(views, ROBOT, None)
    assert names(placement) == ["/ok"]
    reasons = {each.namespace: each.reason for each in placement.skipped}
    assert "no policy server answered" in reasons["/gone"]
    assert "does not serve" in reasons["/loading"] and "draining" in reasons["/leaving"]
    assert reasons["/full"] == "full (4 of 4 sessions)"
    # The robot's own session does not make its replica full: a re-open replaces it.
    assert names(choose([("/full", view(active=4))], ROBOT, None, current="/full")) == ["/full"]


def test_the_first_validated_model_decides_and_another_model_is_never_a_candidate():
    views = [
        ("/other", view(capabilities=OTHER_MODEL)),
        ("/same", view(active=3)),
        ("/same2", view(active=1)),
    ]
    validated = ValidatedModel.of(CAPABILITIES)
    placement = choose(views, ROBOT, validated)
    assert names(placement) == ["/same2", "/same"]
    (skipped,) = placement.skipped
    assert (
        skipped.namespace == "/other"
        and "different model" in skipped.reason
        and "fingerprint" in skipped.reason
    )
    # Before any validation, the model most ready replicas serve sets the reference ...
    placement = choose(views, ROBOT, None)
    assert placement.reference == validated and names(placement) == ["/same2", "/same"]
    # ... a full replica counts (it serves the model), one that did not answer does not ...
    late = [
        ("/late", "no policy server answered on /late/get_status within 1 s"),
        views[0],
        ("/full", view(active=4)),
        ("/same", view()),
    ]
    assert names(choose(late, ROBOT, None)) == ["/same"]
    # ... and a tie goes to list order.
    assert choose(views[:2], ROBOT, None).reference == ValidatedModel.of(OTHER_MODEL)
    # Cameras and chunk size are part of the model's identity too.
    for changed in (dict(chunk_size=20), dict(cameras=())):
        other = dataclasses.replace(CAPABILITIES, **changed)
        assert not choose([("/x", view(capabilities=other))], ROBOT, validated).candidates


def test_a_replica_the_robot_does_not_match_never_sets_the_reference():
    permuted = dataclasses.replace(CAPABILITIES, action_names=("b", "a", "c"))
    placement = choose([("/permuted", view(capabilities=permuted)), ("/ok", view())], ROBOT, None)
    assert names(placement) == ["/ok"] and placement.reference == ValidatedModel.of(CAPABILITIES)
    assert "action" in placement.skipped[0].reason


# ------------------------------------------------------------ moves, through the core


class Fleet:
    """Several fake servers; each answers an observation at once unless ``silent`` or
    ``refusing``."""

    def __init__(self, core, namespaces, capabilities=None) -> None:
        self.core, self.namespaces = core, tuple(namespaces)
        self.views = {namespace: view(instance=f"i{namespace}") for namespace in namespaces}
        for namespace, caps in (capabilities or {}).items():
            self.views[namespace] = dataclasses.replace(self.views[namespace], capabilities=caps)
        self.refuse_open: dict[str, str] = {}
        self.silent: set[str] = set()
        self.refusing: set[str] = set()
        self.current = ""
        self.opened: list[str] = []
        self.asked: list[str] = []
        self.sent: list = []
        self.discovery_waits: list[float] = []

    discovers = False

    def get_status(self, namespace, timeout_s):
        self.asked.append(namespace)
        return self.views[namespace]

    def get_statuses(self, namespaces, timeout_s):
        return ask_all(
            lambda namespace: self.get_status(namespace, timeout_s), namespaces, timeout_s
        )

    def wait_for_discovery(self, timeout_s):
        self.discovery_waits.append(timeout_s)  # every fake replica is known at once

    def open_session(self, namespace, timeout_s, check):
        if namespace in self.refuse_open:
            return f"session refused: {self.refuse_open[namespace]}"
        self.opened.append(namespace)
        grant = SessionGrant(
            f"s{len(self.opened)}", False, "/obs", "/chunk", self.views[namespace].capabilities
        )
        problem = check(grant)
        if problem:
            return problem
        self.current = namespace
        return grant

    def send_observation(self, prepared):
        self.sent.append((self.current, prepared))
        if self.current in self.silent:
            return None
        caps = self.views[self.current].capabilities
        actions = np.tile(np.arange(10, dtype=np.float32)[:, None], (1, 3))
        status, error = (
            (2, "camera observation.images.front is broken")
            if self.current in self.refusing
            else (0, "")
        )
        reply = chunk(
            prepared.request,
            actions=actions,
            model_fingerprint=caps.model_fingerprint,
            action_names=caps.action_names,
            status=status,
            error=error,
        )
        self.core.offer_chunk(reply, prepared.request.sent_monotonic_ns + 20_000_000)
        return None


def fleet(namespaces=("/a", "/b", "/c"), capabilities=None, **overrides):
    clock = Clock()
    made = settings(
        fps=10.0,
        buffer_time_s=0.25,
        request_timeout_s=0.01,
        server_namespaces=list(namespaces),
        **overrides,
    )
    core = ExecutorCore(made, clock())
    link = Fleet(core, namespaces, capabilities)
    worker = NetworkWorker(core, link, ROBOT, clock=clock, clock_ns=clock.ns)
    return clock, core, link, worker


def restarted(core, clock, replica, instance):
    """A new instance beats on ``replica`` after its old one fell silent (a second
    instance heard while the old one still beats is reported, never followed)."""
    clock.t += core.settings.failsafe.heartbeat_timeout_s + 0.01
    core.on_heartbeat(heartbeat(instance), clock(), replica)


def stream(core, clock, worker, steps=1):
    for _ in range(steps):
        feed(core, clock)
        worker.step()
        clock.t += 0.1
        core.control_tick(clock())


def test_start_up_opens_on_the_least_loaded_and_a_capacity_refusal_moves_on_at_once():
    clock, core, link, worker = fleet()
    link.views["/a"] = view(active=3, instance="ia")
    link.refuse_open["/b"] = "the server is full (4 sessions); try another replica"
    result = handshake(core, link, ROBOT, clock)
    assert result.accepted and core.identity.replica == "/c", result
    assert link.opened == ["/c"], "the refusing /b got no session; the loaded /a was not needed"
    assert counts(core, clock).server_namespace == "/c"


def test_only_the_first_placement_waits_for_discovery_bounded_by_asking_each_replica_in_turn():
    clock, core, link, worker = fleet(replica_status_timeout_s=2.0, handshake_timeout_s=30.0)
    assert handshake(core, link, ROBOT, clock).accepted
    assert link.discovery_waits == [6.0], "three replicas, 2 s each"
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.epoch == 1
    assert link.discovery_waits == [6.0], "a re-handshake knows the graph already"
    clock, core, link, worker = fleet(replica_status_timeout_s=20.0, handshake_timeout_s=30.0)
    assert handshake(core, link, ROBOT, clock).accepted and link.discovery_waits == [30.0]


def test_heartbeat_loss_moves_at_once_keeps_the_queue_and_bumps_the_epoch():
    clock, core, link, worker = fleet(heartbeat_timeout_s=1.0)
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.replica == "/a"
    stream(core, clock, worker)
    queued_before = counts(core, clock).queue_depth
    assert queued_before > 0 and counts(core, clock).chunks_merged == 1
    link.views["/a"] = "no policy server answered on /a/get_status within 1 s"
    clock.t += 1.1  # the heartbeat of /a is silent past its timeout (the others beat on)
    core.on_heartbeat(heartbeat("i/b"), clock(), "/b")
    action = core.control_tick(clock())
    assert core.state is ExecutorState.RECONNECTING and action is not None
    assert counts(core, clock).queue_depth == queued_before - 1, (
        "the queue keeps playing during the move"
    )
    asked = len(link.asked)
    assert worker.step(), "the move is due at once: a working session was lost"
    telemetry = counts(core, clock)
    assert (
        core.identity.replica == "/b"
        and core.identity.epoch == 1
        and core.state is ExecutorState.STREAMING
    )
    assert telemetry.replica_moves == 1 and telemetry.last_move_reason.startswith(
        "/a -> /b: server heartbeat silent"
    )
    assert sorted(link.asked[asked:]) == ["/b", "/c"], (
        "the replica left is not asked while another takes the robot"
    )
    while counts(core, clock).queued_time_s > 0.25:  # the queue plays down to the buffer
        clock.t += 0.1
        core.control_tick(clock())
    feed(core, clock)
    worker.step()
    namespace, prepared = link.sent[-1]
    assert namespace == "/b" and prepared.request.epoch == 1
    assert (
        prepared.snapshot.left_over_robot is not None
        and len(prepared.snapshot.left_over_robot) > 0
    ), "the first request to the new replica carries what is still queued"
    assert counts(core, clock).chunks_merged == 2


def streaming_with_a_request_in_flight():
    """A robot streaming on /a of the default fleet, its next request sent and not answered yet."""
    clock, core, link, worker = fleet()
    assert handshake(core, link, ROBOT, clock).accepted
    stream(core, clock, worker)
    clock.t += 1.0
    feed(core, clock)
    prepared = core.start_request(clock(), clock.ns())
    return clock, core, link, worker, prepared


def test_a_chunk_of_the_old_replica_is_never_merged_after_a_move():
    clock, core, link, worker, old = streaming_with_a_request_in_flight()
    core.on_heartbeat(heartbeat("i/a"), clock(), "/a")
    restarted(core, clock, "/a", "restarted")  # its session is gone
    link.views["/a"] = view(active=4, instance="restarted")
    assert core.state is ExecutorState.RECONNECTING
    assert core.wait_for_answer(0.0).cancelled, "the request in flight ends with the move"
    assert worker.step() and core.identity.replica == "/b"
    late = chunk(old.request, model_fingerprint=CAPABILITIES.model_fingerprint)
    assert core.offer_chunk(late, clock.ns()) == "late"
    assert counts(core, clock).last_drop_reason.startswith("late:")


def test_an_announced_drain_moves_after_the_answer_in_flight_is_merged():
    clock, core, link, worker, prepared = streaming_with_a_request_in_flight()
    core.on_heartbeat(
        heartbeat("i/a", draining=True), clock(), "/b"
    )  # another replica's drain: not ours
    core.on_heartbeat(heartbeat("i/a", draining=True), clock(), "/a")
    assert core.state is ExecutorState.STREAMING, "the drain still answers the request in flight"
    link.current = "/a"
    link.send_observation(prepared)
    answer = core.wait_for_answer(1.0)
    assert core.merge(prepared, answer.chunk, answer.received_ns, clock())
    link.views["/a"] = view(draining=True, instance="i/a")
    assert (
        worker.step() and core.identity.replica == "/b" and core.state is ExecutorState.STREAMING
    )
    assert "announced a drain" in counts(core, clock).last_move_reason


def test_another_model_replica_is_reported_never_used_and_none_left_ends_offline_after_the_bound():
    clock, core, link, worker = fleet(
        ("/a", "/b"),
        capabilities={"/b": OTHER_MODEL},
        max_offline_s=5.0,
        reconnect_backoff_max_s=1.0,
    )
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.replica == "/a"
    stream(core, clock, worker)
    assert "/b: the server now serves a different model" in counts(core, clock).replicas_skipped[0]
    merged_at = clock()
    link.views["/a"] = "no policy server answered on /a/get_status within 1 s"
    restarted(core, clock, "/a", "gone")  # and died
    while core.state is not ExecutorState.OFFLINE and clock() < merged_at + 20:
        worker.step()
        clock.t += 0.25
        core.control_tick(clock())
    assert core.state is ExecutorState.OFFLINE
    assert clock() - merged_at == pytest.approx(5.0, abs=0.6), (
        "OFFLINE after max_offline_s since the last chunk"
    )
    assert link.opened == ["/a"], "the other model's replica never got a session"
    assert all(namespace == "/a" for namespace, _ in link.sent)


def test_one_server_serving_another_model_is_still_dead_at_once():
    clock, core, link, worker = fleet(("/only",))
    assert handshake(core, link, ROBOT, clock).accepted
    link.views["/only"] = view(capabilities=OTHER_MODEL)
    restarted(core, clock, "/only", "new")
    clock.t += 1.0
    worker.step()
    assert core.state is ExecutorState.DEAD and "different model" in counts(core, clock).reason


def test_a_replica_refusing_every_request_backs_off_with_its_reason_and_the_budget_runs_out():
    clock, core, link, worker = fleet(
        ("/only",),
        max_offline_s=20.0,
        reconnect_backoff_initial_s=0.5,
        reconnect_backoff_max_s=4.0,
    )
    assert handshake(core, link, ROBOT, clock).accepted
    link.refusing.add("/only")
    opened_at = []
    while core.state is not ExecutorState.OFFLINE and clock() < 200:
        sessions = len(link.opened)
        feed(core, clock)
        worker.step()
        if len(link.opened) > sessions:
            opened_at.append(clock())
        clock.t += 0.05
        core.control_tick(clock())
    gaps = np.diff(opened_at)
    assert core.state is ExecutorState.OFFLINE and clock() < 100 + 20.0 + 1.0, (
        "the offline budget is not refilled"
    )
    assert gaps[-1] >= 4.0 > gaps[0], f"re-handshakes back off: {gaps}"
    telemetry = counts(core, clock)
    assert telemetry.chunks_merged == 0 and telemetry.last_drop_reason.startswith("refused:")
    assert "camera observation.images.front is broken" in telemetry.last_drop_reason
    reconnecting = [
        t.reason for t in core.transitions_since(0)[0] if t.to_state is ExecutorState.RECONNECTING
    ]
    assert "failed requests in a row" in reconnecting[-1] and "backing off" in reconnecting[-1]


def test_a_replica_whose_session_never_answered_is_tried_after_the_others():
    views = [("/hung", view()), ("/busy", view(active=3))]
    assert names(choose(views, ROBOT, None, unanswered=frozenset({"/hung"}))) == ["/busy", "/hung"]
    clock, core, link, worker = fleet(("/hung", "/a", "/b"))
    link.silent.add("/hung")
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.replica == "/hung"
    for _ in range(3):  # two request timeouts, then the move
        feed(core, clock)
        worker.step()
        clock.t += 0.6
    assert (
        core.identity.replica == "/a"
        and "request timeouts in a row" in counts(core, clock).last_move_reason
    )
    assert core.unanswered_replicas == {"/hung"}
    stream(core, clock, worker)
    link.views["/a"] = "no policy server answered on /a/get_status within 1 s"
    restarted(core, clock, "/a", "restarted")
    worker.step()
    assert core.identity.replica == "/b", (
        "the hung replica is less loaded, but never answered this robot"
    )
