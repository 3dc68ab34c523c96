"""The executor's fail-safe state machine, driven with explicit monotonic times."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from lerobot_ros.executor.control.failsafe_config import FailSafeConfig, fallback_action
from lerobot_ros.executor.control.state_machine import FailSafe, TickAction
from lerobot_ros.protocol.status import ExecutorState
from support.paths import REPO

S = ExecutorState
FRESH = 0.05  # age of a fresh action's source observation

CONFIG = FailSafeConfig(
    degraded_after_s=0.5,
    max_action_age_s=1.0,
    max_offline_s=10.0,
    timeout_streak_to_reconnect=2,
    heartbeat_timeout_s=3.0,
    reconnect_backoff_initial_s=0.5,
    reconnect_backoff_max_s=2.0,
)


def streaming(now: float = 0.0) -> FailSafe:
    fail_safe = FailSafe(CONFIG, now=now)
    fail_safe.on_handshake_ok(now)
    fail_safe.on_chunk_merged(now)
    return fail_safe


def reconnecting(now: float = 0.0) -> FailSafe:
    fail_safe = streaming(now)
    fail_safe.reconnect(now, "server instance changed")
    assert fail_safe.state is S.RECONNECTING
    return fail_safe


def test_state_values_match_the_executor_status_message():
    msg = (REPO / "msg" / "ExecutorStatus.msg").read_text()
    for state in ExecutorState:
        assert f"uint8 STATE_{state.name}={state.value}" in msg


def test_connecting_publishes_nothing_until_the_handshake():
    fail_safe = FailSafe(CONFIG, now=0.0)
    assert fail_safe.state is S.CONNECTING
    decision = fail_safe.tick(100.0, queue_depth=5, next_action_age_s=FRESH)
    assert decision.action is TickAction.NOTHING and decision.state is S.CONNECTING
    assert not fail_safe.accepting_chunks
    fail_safe.on_handshake_ok(100.0)
    assert fail_safe.state is S.STREAMING and fail_safe.accepting_chunks
    assert fail_safe.transitions[-1].from_state is S.CONNECTING
    assert fail_safe.transitions[-1].reason == "handshake accepted"


def test_a_failed_first_handshake_is_dead_without_ever_commanding():
    fail_safe = FailSafe(CONFIG, now=0.0)
    fail_safe.on_handshake_failed(1.0, "action names differ")
    assert fail_safe.state is S.DEAD
    assert "first handshake failed: action names differ" in fail_safe.reason
    # no final fallback: never commanded
    assert fail_safe.tick(1.1, 0, None).action is TickAction.NOTHING


def test_streaming_executes_fresh_actions():
    fail_safe = streaming()
    decision = fail_safe.tick(0.1, queue_depth=10, next_action_age_s=FRESH)
    assert decision.action is TickAction.EXECUTE
    assert (
        decision.state is S.STREAMING and not decision.clear_queue and decision.transitions == ()
    )


def test_late_chunks_with_a_non_empty_queue_degrade_then_a_merge_recovers():
    fail_safe = streaming()
    assert fail_safe.tick(0.5, 10, FRESH).state is S.STREAMING  # exactly degraded_after_s: not yet
    decision = fail_safe.tick(0.6, 10, FRESH)
    assert decision.action is TickAction.EXECUTE  # the queue still holds fresh actions
    assert decision.state is S.DEGRADED
    assert [(t.from_state, t.to_state) for t in decision.transitions] == [
        (S.STREAMING, S.DEGRADED)
    ]
    assert "no chunk merged for 0.600 s" in fail_safe.reason
    fail_safe.on_chunk_merged(0.7)
    assert fail_safe.state is S.STREAMING
    assert fail_safe.tick(0.8, 10, FRESH).state is S.STREAMING


def test_an_empty_queue_stalls_and_publishes_the_fallback():
    fail_safe = streaming()
    decision = fail_safe.tick(0.1, queue_depth=0, next_action_age_s=None)
    assert decision.action is TickAction.FALLBACK and decision.fallback_mode is None
    assert decision.state is S.STALLED and not decision.clear_queue
    assert fail_safe.reason == "queue empty"
    fail_safe.on_chunk_merged(0.2)
    assert fail_safe.state is S.STREAMING
    assert fail_safe.tick(0.25, 8, FRESH).action is TickAction.EXECUTE


def test_degraded_stalls_when_the_queue_runs_dry():
    fail_safe = streaming()
    fail_safe.tick(0.6, 3, FRESH)
    assert fail_safe.state is S.DEGRADED
    assert fail_safe.tick(0.7, 0, None).state is S.STALLED


@pytest.mark.parametrize("age", [1.01, 50.0, None, math.nan])
def test_a_stale_next_action_is_never_executed_and_the_queue_is_flagged_for_clearing(age):
    fail_safe = streaming()
    decision = fail_safe.tick(0.1, queue_depth=12, next_action_age_s=age)
    assert decision.action is TickAction.FALLBACK
    assert decision.clear_queue
    assert decision.state is S.STALLED
    assert "stale" in decision.reason
    # While stalled, a stale queue is still never executed.
    again = fail_safe.tick(0.2, queue_depth=12, next_action_age_s=age)
    assert again.action is TickAction.FALLBACK and again.clear_queue


def test_an_action_exactly_at_the_age_bound_is_still_executed():
    assert streaming().tick(0.1, 5, CONFIG.max_action_age_s).action is TickAction.EXECUTE


def test_a_timeout_streak_starts_reconnecting_and_a_merge_resets_the_streak():
    fail_safe = streaming()
    fail_safe.on_request_timeout(1.0)
    assert fail_safe.state is S.STREAMING and fail_safe.timeout_streak == 1
    fail_safe.on_chunk_merged(1.1)
    assert fail_safe.timeout_streak == 0
    fail_safe.on_request_timeout(2.0)
    fail_safe.on_request_timeout(3.0)
    assert fail_safe.state is S.RECONNECTING
    assert fail_safe.reason == "2 request timeouts in a row"
    assert not fail_safe.accepting_chunks


def test_a_silent_heartbeat_starts_reconnecting():
    fail_safe = streaming()
    fail_safe.on_heartbeat(2.0)
    fail_safe.on_chunk_merged(4.5)
    assert fail_safe.tick(5.0, 5, FRESH).state is S.STREAMING  # 3.0 s silent: at the bound
    decision = fail_safe.tick(5.1, 5, FRESH)
    assert decision.state is S.RECONNECTING
    assert "heartbeat silent for 3.100 s" in fail_safe.reason
    # Queued actions that are still fresh keep being executed while reconnecting.
    assert decision.action is TickAction.EXECUTE


def test_reconnecting_falls_back_once_the_queue_is_empty_or_stale():
    fail_safe = reconnecting()
    assert fail_safe.tick(0.1, 0, None).action is TickAction.FALLBACK
    stale = fail_safe.tick(0.2, 4, 2.0)
    assert stale.action is TickAction.FALLBACK and stale.clear_queue
    assert fail_safe.state is S.RECONNECTING


def test_server_restart_reconnects_and_a_new_handshake_streams_again():
    fail_safe = streaming()
    fail_safe.reconnect(1.0, "server instance id changed")
    assert fail_safe.state is S.RECONNECTING and fail_safe.reason == "server instance id changed"
    fail_safe.on_chunk_merged(1.1)  # a chunk of the abandoned session changes nothing
    assert fail_safe.state is S.RECONNECTING
    fail_safe.on_handshake_ok(1.6)
    assert fail_safe.state is S.STREAMING
    # Only a chunk refills the offline budget: a server that accepts sessions and never answers
    # runs it out.
    assert fail_safe.offline_s(1.6) == pytest.approx(1.6)
    fail_safe.on_chunk_merged(1.7)
    assert fail_safe.offline_s(1.7) == 0.0


def test_reconnect_backoff_doubles_up_to_its_cap_and_resets_on_success():
    fail_safe = reconnecting(now=0.0)
    assert not fail_safe.reconnect_due(0.49)
    assert fail_safe.reconnect_due(0.5)  # initial backoff
    waits, now = [], 0.5
    for _ in range(4):
        fail_safe.on_handshake_failed(now, "no answer")
        waits.append(fail_safe.backoff_s)
        assert not fail_safe.reconnect_due(now + fail_safe.backoff_s - 0.01)
        now += fail_safe.backoff_s
        assert fail_safe.reconnect_due(now)
    assert waits == [1.0, 2.0, 2.0, 2.0]
    assert fail_safe.state is S.RECONNECTING and fail_safe.last_handshake_error == "no answer"
    fail_safe.on_handshake_ok(now)
    assert not fail_safe.reconnect_due(now)
    # A session that never answered with a chunk does not reset the backoff: it keeps its doubled
    # wait.
    fail_safe.reconnect(now, "again")
    assert "backing off 2 s" in fail_safe.reason
    assert not fail_safe.reconnect_due(now + 1.99) and fail_safe.reconnect_due(now + 2.0)
    # A merged chunk resets it.
    fail_safe.on_handshake_ok(now + 2.0)
    fail_safe.on_chunk_merged(now + 2.1)
    assert fail_safe.backoff_s == 0.5
    fail_safe.reconnect(now + 3.0, "again")
    assert not fail_safe.reconnect_due(now + 3.49) and fail_safe.reconnect_due(now + 3.5)


def test_with_several_replicas_losing_a_working_session_re_handshakes_at_once():
    fail_safe = FailSafe(dataclasses.replace(CONFIG, move_at_once=True), now=0.0)
    fail_safe.on_handshake_ok(0.0)
    fail_safe.on_chunk_merged(0.1)
    fail_safe.reconnect(1.0, "replica lost")
    assert fail_safe.reconnect_due(1.0)
    fail_safe.on_handshake_ok(1.0)  # the next replica grants a session but never answers
    fail_safe.on_request_timeout(2.0, refusal="camera broken")
    fail_safe.on_request_timeout(2.1, refusal="camera broken")
    assert fail_safe.state is S.RECONNECTING and not fail_safe.reconnect_due(2.1)
    assert fail_safe.reason.startswith(
        "2 failed requests in a row; the server refused the last: camera broken"
    )


def test_handshake_failures_beyond_the_offline_budget_are_offline_not_dead():
    fail_safe = reconnecting(now=0.0)
    fail_safe.on_handshake_failed(9.9, "no answer")
    assert fail_safe.state is S.RECONNECTING
    fail_safe.on_handshake_failed(10.1, "no answer")
    assert fail_safe.state is S.OFFLINE
    assert "offline for 10.100 s (> max_offline_s 10.0)" in fail_safe.reason
    assert "last handshake error: no answer" in fail_safe.reason
    assert "motion restarts on ~/resume" in fail_safe.reason


@pytest.mark.parametrize("make", [reconnecting, lambda now: _stalled(now)])
def test_offline_beyond_the_budget_while_reconnecting_or_stalled_holds_and_keeps_reconnecting(
    make,
):
    fail_safe = make(0.0)
    assert fail_safe.tick(10.0, 0, None).state is not S.OFFLINE  # at the budget: not yet
    first = fail_safe.tick(10.01, 3, FRESH)
    assert first.state is S.OFFLINE and first.transitions[-1].to_state is S.OFFLINE
    assert (
        first.action is TickAction.FALLBACK and first.fallback_mode == "hold" and first.clear_queue
    )
    # Unlike DEAD, it keeps holding (a real arm under gravity needs the command) and keeps looking.
    for t in (10.02, 50.0, 500.0):
        decision = fail_safe.tick(t, 0, None)
        assert decision.action is TickAction.FALLBACK and decision.fallback_mode == "hold"
    assert fail_safe.reconnect_due(500.0) and not fail_safe.accepting_chunks


def test_offline_reconnects_on_its_own_but_moves_only_on_an_explicit_resume():
    fail_safe = reconnecting(now=0.0)
    fail_safe.tick(10.5, 0, None)
    assert fail_safe.state is S.OFFLINE
    assert fail_safe.resume_offline(11.0, "~/resume").startswith("no session yet")
    fail_safe.on_handshake_failed(11.0, "server is inactive")
    assert (
        fail_safe.state is S.OFFLINE and "the last attempt: server is inactive" in fail_safe.reason
    )
    assert not fail_safe.reconnect_due(11.0)  # backing off between attempts
    assert fail_safe.reconnect_due(14.0)
    fail_safe.on_handshake_ok(14.0)
    assert fail_safe.state is S.OFFLINE and fail_safe.offline_session
    assert "a session is open again: holding until resumed" in fail_safe.reason
    assert not fail_safe.reconnect_due(100.0) and not fail_safe.accepting_chunks
    held = fail_safe.tick(100.0, 0, None)
    assert (
        held.action is TickAction.FALLBACK
        and held.fallback_mode == "hold"
        and held.state is S.OFFLINE
    )
    assert fail_safe.resume_offline(100.0, "~/resume") is None
    assert fail_safe.state is S.STREAMING and fail_safe.accepting_chunks
    assert fail_safe.offline_s(100.0) == 0.0, "a resume starts a whole offline budget"
    # empty queue: the first request is fresh
    assert fail_safe.tick(100.02, 0, None).state is S.STALLED
    fail_safe.on_chunk_merged(100.1)
    assert fail_safe.state is S.STREAMING


def test_auto_resume_restarts_motion_as_soon_as_a_session_opens():
    fail_safe = FailSafe(dataclasses.replace(CONFIG, auto_resume=True), now=0.0)
    fail_safe.on_handshake_ok(0.0)
    fail_safe.reconnect(0.0, "server gone")
    fail_safe.tick(10.5, 0, None)
    assert fail_safe.state is S.OFFLINE
    fail_safe.on_handshake_ok(12.0)
    assert fail_safe.state is S.STREAMING and "auto_resume" in fail_safe.reason


def test_a_session_lost_while_offline_is_looked_for_again():
    fail_safe = reconnecting(now=0.0)
    fail_safe.tick(10.5, 0, None)
    fail_safe.on_handshake_ok(12.0)
    fail_safe.reconnect(13.0, "server restarted")
    assert (
        fail_safe.state is S.OFFLINE
        and not fail_safe.offline_session
        and fail_safe.reconnect_due(13.0)
    )


def test_revive_after_dead_tries_one_handshake_and_a_changed_model_is_dead_again():
    fail_safe = streaming()
    fail_safe.on_model_changed(1.0, "different model")
    fail_safe.revive(2.0, "lifecycle activate")
    assert fail_safe.state is S.OFFLINE and fail_safe.reconnect_due(2.0)
    fail_safe.on_model_changed(2.1, "still a different model")
    assert fail_safe.state is S.DEAD and fail_safe.reason == "still a different model"
    fail_safe.revive(3.0, "lifecycle activate")
    fail_safe.on_handshake_ok(3.1)
    assert (
        fail_safe.resume_offline(3.1, "lifecycle activate") is None
        and fail_safe.state is S.STREAMING
    )


def test_resume_offline_outside_offline_says_so():
    assert "STREAMING, not OFFLINE" in streaming().resume_offline(1.0, "~/resume")


def _stalled(now: float) -> FailSafe:
    fail_safe = streaming(now)
    fail_safe.on_heartbeat(now)
    fail_safe.tick(now, 0, None)
    assert fail_safe.state is S.STALLED
    # Heartbeats keep arriving (the server is up but sends no chunks).
    for t in np.arange(now, now + 10.5, 1.0):
        fail_safe.on_heartbeat(float(t))
    return fail_safe


def test_a_different_model_is_dead_with_one_final_fallback():
    fail_safe = streaming()
    fail_safe.on_model_changed(1.0, "server now serves model fingerprint b != a")
    assert fail_safe.state is S.DEAD
    first = fail_safe.tick(1.01, 10, FRESH)
    assert first.action is TickAction.FALLBACK and first.clear_queue
    assert "server now serves model fingerprint b != a" in first.reason
    assert fail_safe.tick(1.02, 10, FRESH).action is TickAction.NOTHING


def test_dead_is_terminal():
    fail_safe = streaming()
    fail_safe.on_model_changed(1.0, "different model")
    count = len(fail_safe.transitions)
    fail_safe.on_handshake_ok(2.0)
    fail_safe.on_chunk_merged(2.0)
    fail_safe.on_heartbeat(2.0)
    fail_safe.on_request_timeout(2.0)
    fail_safe.reconnect(2.0, "restart")
    fail_safe.on_handshake_failed(2.0, "no")
    fail_safe.on_model_changed(2.0, "another model")
    fail_safe.pause(2.0)
    fail_safe.resume(3.0)
    fail_safe.tick(3.0, 5, FRESH)
    assert fail_safe.state is S.DEAD and fail_safe.reason == "different model"
    assert len(fail_safe.transitions) == count
    assert not fail_safe.reconnect_due(100.0) and not fail_safe.accepting_chunks


def test_pause_holds_and_spends_no_budget():
    fail_safe = reconnecting(now=0.0)
    fail_safe.pause(1.0)
    decision = fail_safe.tick(500.0, 0, None)
    assert decision.action is TickAction.FALLBACK and decision.fallback_mode == "hold"
    assert decision.state is S.RECONNECTING and fail_safe.paused
    assert fail_safe.offline_s(500.0) == pytest.approx(1.0)
    assert not fail_safe.reconnect_due(500.0)  # no attempts while paused
    fail_safe.resume(1000.0)
    assert not fail_safe.paused
    assert fail_safe.offline_s(1000.0) == pytest.approx(0.0), "a resume starts a whole budget"
    assert fail_safe.reconnect_due(1000.0)
    assert fail_safe.tick(1009.9, 0, None).state is S.RECONNECTING  # 9.9 s of active offline time
    # 10.1 s: a server that never answers ends OFFLINE
    assert fail_safe.tick(1010.1, 0, None).state is S.OFFLINE


def test_pause_does_not_count_toward_heartbeat_or_degraded_timeouts():
    fail_safe = streaming()
    fail_safe.on_heartbeat(0.0)
    fail_safe.pause(0.2)
    fail_safe.resume(60.0)
    decision = fail_safe.tick(60.2, 5, FRESH)
    assert decision.state is S.STREAMING and decision.action is TickAction.EXECUTE
    # 0.6 s of active time since the chunk
    assert fail_safe.tick(60.4, 5, FRESH).state is S.DEGRADED


def test_an_event_during_a_pause_counts_from_the_resume():
    fail_safe = streaming()
    fail_safe.pause(1.0)
    fail_safe.on_chunk_merged(5.0)
    fail_safe.resume(10.0)
    assert fail_safe.offline_s(10.0) == 0.0
    assert fail_safe.tick(10.4, 5, FRESH).state is S.STREAMING


def test_pause_does_not_make_stale_actions_fresh():
    # The staleness bound is about the world, not the budget: the caller passes real ages.
    fail_safe = streaming()
    fail_safe.pause(0.1)
    fail_safe.resume(30.0)
    decision = fail_safe.tick(30.0, 5, 29.9)
    assert decision.action is TickAction.FALLBACK and decision.clear_queue


def test_the_transition_log_is_bounded_and_records_from_to_reason_and_time():
    fail_safe = FailSafe(CONFIG, now=0.0, transition_log_size=3)
    fail_safe.on_handshake_ok(1.0)
    fail_safe.tick(1.1, 0, None)  # -> STALLED
    fail_safe.on_chunk_merged(1.2)  # -> STREAMING
    fail_safe.reconnect(1.3, "restart")  # -> RECONNECTING
    log = fail_safe.transitions
    assert len(log) == 3
    assert [(t.from_state, t.to_state, t.at_s) for t in log] == [
        (S.STREAMING, S.STALLED, 1.1),
        (S.STALLED, S.STREAMING, 1.2),
        (S.STREAMING, S.RECONNECTING, 1.3),
    ]
    assert log[-1].reason == "restart"
    assert fail_safe.transition_count == 4
    # With the log full, a tick still reports exactly the transitions it made.
    fail_safe.on_handshake_ok(1.4)  # -> STREAMING
    decision = fail_safe.tick(1.5, 0, None)  # -> STALLED
    assert [(t.from_state, t.to_state) for t in decision.transitions] == [(S.STREAMING, S.STALLED)]
    assert fail_safe.tick(1.6, 0, None).transitions == ()


def test_config_errors_say_what_was_expected():
    with pytest.raises(ValueError, match="degraded_after_s must be > 0 seconds .*, got 0"):
        FailSafeConfig(**{**CONFIG.__dict__, "degraded_after_s": 0})
    with pytest.raises(ValueError, match="timeout_streak_to_reconnect must be >= 1, got 0"):
        FailSafeConfig(**{**CONFIG.__dict__, "timeout_streak_to_reconnect": 0})
    with pytest.raises(
        ValueError, match="initial_s must be <= reconnect_backoff_max_s, got 3.0 > 2.0"
    ):
        FailSafeConfig(**{**CONFIG.__dict__, "reconnect_backoff_initial_s": 3.0})
    with pytest.raises(ValueError, match="queue_depth must be >= 0, got -1"):
        streaming().tick(0.0, -1, None)


# ------------------------------------------------------------- fallback


def test_fallback_hold_prefers_the_measured_position():
    measured, last = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_array_equal(fallback_action("hold", last, measured, 2), measured)
    np.testing.assert_array_equal(fallback_action("hold", last, None, 2), last)
    np.testing.assert_array_equal(fallback_action("hold", last, np.array([np.nan, 2.0]), 2), last)
    assert fallback_action("hold", None, None, 2) is None


def test_fallback_repeat_last_prefers_the_last_command():
    measured, last = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_array_equal(fallback_action("repeat_last", last, measured, 2), last)
    np.testing.assert_array_equal(fallback_action("repeat_last", None, measured, 2), measured)


def test_fallback_zero_and_copies():
    np.testing.assert_array_equal(fallback_action("zero", None, None, 3), np.zeros(3))
    measured = np.array([1.0, 2.0])
    held = fallback_action("hold", None, measured, 2)
    held[0] = 9.0
    assert measured[0] == 1.0


def test_fallback_errors_say_what_was_expected():
    with pytest.raises(ValueError, match="must be one of hold, repeat_last, zero, got 'freeze'"):
        fallback_action("freeze", None, None, 2)
    with pytest.raises(ValueError, match=r"measured must have shape \(2,\), got \(3,\)"):
        fallback_action("hold", None, np.zeros(3), 2)
