"""The network worker's one-request-in-flight cycle and re-handshakes (worker.py), with a fake
server link."""

from __future__ import annotations

import math
import time

import pytest

from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.status import ExecutorState
from support.executor_harness import CAPABILITIES, connected, counts, feed, heartbeat


def test_one_request_in_flight_merges_and_then_waits_for_the_buffer_to_drain():
    clock, core, link, worker = connected()
    assert core.state is ExecutorState.STREAMING
    assert not worker.step(), "no observation without sensor data"
    assert core.snapshot(clock()).last_problem.startswith("no joint state")
    feed(core, clock)
    assert (
        worker.step()
        and counts(core, clock).chunks_merged == 1
        and counts(core, clock).queue_depth == 10
    )
    assert not worker.step(), "queue covers 1 s > buffer 0.25 s: no request"
    assert len(link.sent) == 1
    assert counts(core, clock).latency_ms_p50 == pytest.approx(20.0)
    for _ in range(8):
        clock.t += 0.1
        assert core.control_tick(clock()) is not None
    feed(core, clock)
    assert worker.step() and len(link.sent) == 2
    seqs = [prepared.request.seq for prepared in link.sent]
    assert seqs == sorted(set(seqs))


def test_timeouts_reconnect_with_a_bumped_epoch_and_a_changed_model_is_dead():
    clock, core, link, worker = connected()
    feed(core, clock)
    link.silent = True
    worker.step()
    worker.step()
    assert counts(core, clock).request_timeouts == 2 and core.state is ExecutorState.RECONNECTING
    clock.t += 1.0
    link.silent, link.instance = False, "i2"
    assert worker.step() and core.state is ExecutorState.STREAMING
    identity = core.identity
    assert (identity.epoch, identity.session_id, identity.instance_id) == (1, "s2", "i2")
    feed(core, clock)
    worker.step()
    assert link.sent[-1].request.epoch == 1 and counts(core, clock).chunks_merged == 1
    # The server restarts with the joints in another order (its old instance has gone silent).
    clock.t += core.settings.failsafe.heartbeat_timeout_s + 0.1
    core.on_heartbeat(heartbeat("i3"), clock())
    assert core.state is ExecutorState.RECONNECTING
    link.capabilities = ServerCapabilities(
        **{**CAPABILITIES.__dict__, "action_names": ("b", "a", "c")}
    )
    link.instance = "i3"
    clock.t += 1.0
    worker.step()
    assert core.state is ExecutorState.DEAD and "action names" in counts(core, clock).reason
    assert link.sessions == 2, "no session is opened with a different model"
    assert core.control_tick(clock()) is not None  # one final fallback
    assert core.control_tick(clock()) is None


def test_worker_thread_stops_promptly():
    clock, core, link, worker = connected()
    worker.idle_s = 0.01
    worker.start()
    time.sleep(0.05)
    started = time.monotonic()
    worker.stop()
    worker.join(2.0)
    assert not worker.is_alive() and time.monotonic() - started < 1.0
    assert math.isfinite(counts(core, clock).queued_time_s)


def test_a_due_request_that_cannot_be_sent_is_retried_per_policy_step_not_per_control_tick():
    clock, core, link, worker = connected()  # fps 10: one retry per 0.1 s
    attempts = []
    start = core.start_request
    core.start_request = lambda *args: attempts.append(1) or start(*args)
    worker.start()
    try:
        ticking_until = time.monotonic() + 0.35
        while time.monotonic() < ticking_until:  # a 1 kHz control tick saying "due" every time
            core.wake_worker()
            time.sleep(0.001)
        assert 2 <= len(attempts) <= 6, f"{len(attempts)} attempts in 0.35 s without sensor data"
        assert not link.sent
        feed(core, clock)
        sent_by = time.monotonic() + 1.0
        while not link.sent and time.monotonic() < sent_by:
            core.wake_worker()
            time.sleep(0.001)
        assert link.sent, "the retry after sensor data arrived sent the request"
    finally:
        worker.stop()
        worker.join(2.0)
