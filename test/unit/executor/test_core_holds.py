"""The core's named holds, the goal's task and the end of a session (core.py), with a fake server link."""

from __future__ import annotations

import numpy as np

from lerobot_ros.executor.core import PreparedRequest
from lerobot_ros.executor.state_machine import ExecutorState
from support.executor_harness import connected, counts, feed


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
    assert np.allclose(command, [0.1, 0.2, 0.3]), "hold: the measured joint positions, in joint order"


def test_observations_carry_the_core_task():
    clock, core, link, worker = connected(task="default task")
    feed(core, clock)
    assert core.prepare_request(clock(), clock.ns()).task == "default task"
    core.set_task("stack the cubes")
    prepared = core.prepare_request(clock(), clock.ns())
    assert isinstance(prepared, PreparedRequest) and prepared.task == "stack the cubes"


def test_ending_the_session_drops_its_queue_and_any_chunk_still_on_its_way():
    clock, core, link, worker = connected()
    feed(core, clock)
    prepared = core.prepare_request(clock(), clock.ns())
    core.begin_request(prepared.request)
    assert worker.step() or True
    session_id = core.end_session()
    assert session_id == "s1" and core.identity.session_id == ""
    assert counts(core, clock).queue_depth == 0
    late = link.sent[-1] if link.sent else prepared
    from support.executor_harness import chunk

    assert not core.merge(late, chunk(late.request), clock.ns(), clock()), "a chunk of the closed session is dropped"


def test_reopen_re_handshakes_on_a_new_session():
    clock, core, link, worker = connected()
    core.reopen(clock(), "activated again: opening a new session")
    assert core.state is ExecutorState.RECONNECTING
    clock.t += 5
    worker.step()
    assert core.state is ExecutorState.STREAMING and core.identity.session_id == "s2"
