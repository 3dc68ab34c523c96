"""The core's session verbs (``ExecutorCore``): holds by name, the task, heartbeats, episode
resets, the end of a session; on a real core with a fake server link."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.protocol.status import ExecutorState
from support.executor_harness import chunk, connected, counts, feed, heartbeat


def test_the_executor_streams_again_only_when_no_holder_is_left():
    clock, core, link, worker = connected()
    core.pause(clock(), "lifecycle")
    core.pause(clock(), "goal")
    core.resume(clock(), "goal")
    assert counts(core, clock).paused and core.holds("lifecycle") and not core.holds("goal")
    feed(core, clock)
    assert not core.request_due(clock()), "nothing is requested while anyone holds"
    core.resume(clock(), "operator")  # a holder that never held changes nothing
    assert counts(core, clock).paused
    core.resume(clock(), "lifecycle")
    assert not counts(core, clock).paused


def test_a_hold_publishes_the_measured_position():
    clock, core, link, worker = connected()
    feed(core, clock)
    core.pause(clock(), "goal")
    command = core.control_tick(clock())
    assert np.allclose(command, [0.1, 0.2, 0.3]), (
        "hold: the measured joint positions, in joint order"
    )


def test_observations_carry_the_core_task():
    clock, core, link, worker = connected(task="default task")
    feed(core, clock)
    assert core.start_request(clock(), clock.ns()).task == "default task"
    core.set_task("stack the cubes")
    prepared = core.start_request(clock(), clock.ns())
    assert isinstance(prepared, PendingRequest) and prepared.task == "stack the cubes"


def test_ending_the_session_drops_its_queue_and_any_chunk_still_on_its_way():
    clock, core, link, worker = connected()
    feed(core, clock)
    prepared = core.start_request(clock(), clock.ns())
    assert worker.step() or True
    session_id = core.end_session()
    assert session_id == "s1" and core.identity.session_id == ""
    assert counts(core, clock).queue_depth == 0
    late = link.sent[-1] if link.sent else prepared
    assert not core.merge(late, chunk(late.request), clock.ns(), clock()), (
        "a chunk of the closed session is dropped"
    )


def test_reopen_re_handshakes_on_a_new_session():
    clock, core, link, worker = connected()
    core.reopen(clock(), "activated again: opening a new session")
    assert core.state is ExecutorState.RECONNECTING
    clock.t += 5
    worker.step()
    assert core.state is ExecutorState.STREAMING and core.identity.session_id == "s2"


def test_reset_clears_the_queue_bumps_the_episode_and_drops_the_old_answer():
    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    session, episode = core.reset_episode()
    assert (session, episode, counts(core, clock).queue_depth) == ("s1", 1, 0)
    feed(core, clock)
    worker.step()
    assert link.sent[-1].request.episode == 1


def test_pause_holds_and_sends_nothing():
    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    core.pause(clock())
    assert core.control_tick(clock()).tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert counts(core, clock).queue_depth == 10
    clock.t += 100.0
    assert not core.request_due(clock()) and core.state is not ExecutorState.DEAD
    core.resume(clock())
    assert counts(core, clock).paused is False
    # A long pause re-opens the session (the server may have closed it as idle).
    reason = counts(core, clock).reason
    assert core.state is ExecutorState.RECONNECTING and "re-opening the session" in reason
    assert "100.0 s without an observation" in reason and "after 10 s" in reason, reason


@pytest.mark.parametrize(
    "idle_timeout_s, pause_s",
    [(10.0, 1.0), (math.inf, 1000.0)],
    ids=["a short pause", "a server that never closes idle sessions"],
)
def test_a_pause_within_the_granted_idle_timeout_keeps_the_session(idle_timeout_s, pause_s):
    clock, core, link, worker = connected(idle_timeout_s=idle_timeout_s)
    feed(core, clock)
    worker.step()
    state = core.state
    core.pause(clock())
    clock.t += pause_s
    core.resume(clock())
    assert core.state is state


def test_a_resume_counts_the_quiet_time_before_the_pause_against_the_granted_idle_timeout():
    clock, core, link, worker = connected(idle_timeout_s=3.0)
    feed(core, clock)
    worker.step()  # the last observation the server hears
    state = core.state
    clock.t += 1.0  # playing the queue, nothing due yet
    core.pause(clock())
    clock.t += 0.4
    core.resume(clock())
    assert core.state is state, "1.4 s quiet of a 3 s idle timeout: the session is kept"
    clock.t += 0.2
    core.pause(clock())
    clock.t += 0.2  # a short pause, but 1.8 s since the server last heard from this session
    core.resume(clock())
    assert core.state is ExecutorState.RECONNECTING, counts(core, clock).reason


def test_the_session_identity_is_replaced_whole_and_transitions_are_read_once():
    clock, core, link, worker = connected()
    before = core.identity
    core.reset_episode()
    assert (before.episode, core.identity.episode) == (0, 1), (
        "a reader's identity never changes under it"
    )
    assert core.identity.session_id == before.session_id == "s1"
    transitions, seen = core.transitions_since(0)
    assert [t.to_state for t in transitions] == [ExecutorState.STREAMING] and seen == 1
    assert core.transitions_since(seen) == ((), seen)


def test_a_second_server_heard_while_ours_beats_is_reported_not_followed():
    clock, core, link, worker = connected()
    core.on_heartbeat(heartbeat("i1"), clock())
    clock.t += 0.5
    core.on_heartbeat(heartbeat("impostor"), clock())
    assert core.state is ExecutorState.STREAMING or core.state is ExecutorState.CONNECTING
    assert (
        core.identity.instance_id == "i1"
        and counts(core, clock).other_server_instance == "impostor"
    )
    for _ in range(4):  # both keep beating: no flapping
        clock.t += 0.5
        core.on_heartbeat(heartbeat("i1"), clock())
        core.on_heartbeat(heartbeat("impostor"), clock())
    assert core.state is not ExecutorState.RECONNECTING
    clock.t += core.settings.failsafe.heartbeat_timeout_s + 0.1
    core.on_heartbeat(heartbeat("impostor"), clock())
    assert core.state is ExecutorState.RECONNECTING, "ours went silent: the other one is a restart"
