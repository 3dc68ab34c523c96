"""The session's identity, model check, heartbeat verdicts and named holds (session_state.py),
plain Python."""

from __future__ import annotations

import math

from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.executor.session.session_state import REOPEN_AT_IDLE_SHARE, Heard, SessionState
from lerobot_ros.protocol.contract import ServerCapabilities
from support.executor_harness import CAPABILITIES, heartbeat

REPLICAS = ("/a", "/b")
HEARTBEAT_TIMEOUT_S = 1.0


def grant(
    session_id: str, rtc: bool = False, idle_timeout_s: float = 10.0, capabilities=CAPABILITIES
) -> SessionGrant:
    return SessionGrant(
        session_id, rtc, "/obs", "/chunk", capabilities, idle_timeout_s=idle_timeout_s
    )


def opened(idle_timeout_s: float = 10.0) -> SessionState:
    state = SessionState(REPLICAS, HEARTBEAT_TIMEOUT_S, "default task", now_s=0.0)
    assert (
        state.opened(grant("s1", idle_timeout_s=idle_timeout_s), "i1", 0.0, "/a", why_left="")
        is True
    )
    return state


def test_the_first_session_validates_the_model_every_later_one_is_compared_with():
    state = SessionState(REPLICAS, HEARTBEAT_TIMEOUT_S, "", now_s=0.0)
    other = ServerCapabilities(**{**CAPABILITIES.__dict__, "action_names": ("b", "a", "c")})
    assert state.model_difference(other) is None, "nothing validated yet: nothing to differ from"
    state.opened(grant("s1"), "i1", 0.0, "/a", why_left="")
    assert state.model_difference(CAPABILITIES) is None
    assert "action names" in state.model_difference(other)
    state.opened(grant("s2", capabilities=other), "i2", 1.0, "/a", why_left="")
    assert state.identity.model.action_names == CAPABILITIES.action_names, (
        "the first model is kept"
    )


def test_a_re_opened_session_bumps_the_epoch_keeps_the_episode_and_a_move_is_recorded():
    state = opened()
    first = state.identity
    assert (first.session_id, first.epoch, first.replica, first.policy_cameras) == (
        "s1",
        0,
        "/a",
        frozenset(CAPABILITIES.camera_names),
    )
    assert state.next_episode() == ("s1", 1)
    assert (
        state.opened(grant("s2"), "i2", 1.0, "/b", why_left="server /a announced a drain") is False
    )
    identity = state.identity
    assert (identity.session_id, identity.epoch, identity.episode, identity.replica) == (
        "s2",
        1,
        1,
        "/b",
    )
    assert first.session_id == "s1" and first.episode == 0, (
        "a reader's identity never changes under it"
    )
    assert (
        state.fleet.moves == 1 and state.fleet.last_move == "/a -> /b: server /a announced a drain"
    )
    assert state.fleet.unanswered == frozenset({"/a"}), "the left session never merged a chunk"


def test_a_changed_merge_mode_asks_for_a_fresh_queue():
    state = opened()
    assert state.opened(grant("s2", rtc=True), "i1", 1.0, "/a", why_left="") is True
    assert state.opened(grant("s3", rtc=True), "i1", 2.0, "/a", why_left="") is False


def test_ending_a_session_clears_its_id_and_moves_the_epoch():
    state = opened()
    assert state.ended() == "s1"
    assert (state.identity.session_id, state.identity.epoch) == ("", 1)


def test_only_the_current_replicas_heartbeat_counts_and_a_second_instance_is_reported_not_followed():  # noqa: E501 - the test's id names what it checks
    state = opened()
    assert state.heartbeat(heartbeat("i1"), 0.5, "/b", streaming=True) == (Heard.IGNORED, "")
    assert state.heartbeat(heartbeat("i1"), 0.5, "/a", streaming=True) == (Heard.ALIVE, "")
    assert state.heartbeat(heartbeat("other"), 1.0, "/a", streaming=True) == (
        Heard.IGNORED,
        "",
    )
    assert state.other_instance == "other"
    heard, reason = state.heartbeat(heartbeat("other"), 1.6, "/a", streaming=True)
    assert heard is Heard.RESTARTED and "instance i1 -> other" in reason, (
        "ours went silent: a restart"
    )


def test_a_drain_is_announced_once_and_only_while_streaming():
    state = opened()
    state.heartbeat(heartbeat("i1", draining=True), 0.1, "/a", streaming=False)
    assert state.fleet.take_drain() == ""
    state.heartbeat(heartbeat("i1", draining=True), 0.2, "/a", streaming=True)
    assert state.fleet.take_drain() == "server /a announced a drain"
    assert state.fleet.take_drain() == ""


def test_holds_are_kept_by_name_and_a_long_quiet_hold_re_opens_the_session():
    state = opened(idle_timeout_s=10.0)
    state.hold("operator", 1.0)
    state.hold("goal", 1.0)
    assert state.let_go("operator", 2.0) is None, "the goal still holds"
    assert state.holds("goal") and not state.holds("operator")
    assert state.let_go("goal", 2.0) == "", "2 s quiet of a 10 s idle timeout: the session is kept"
    state.hold("operator", 3.0)
    quiet_s = REOPEN_AT_IDLE_SHARE * 10.0 + 0.1
    reason = state.let_go("operator", quiet_s)
    assert (
        reason.startswith(f"resumed after {quiet_s:.1f} s without an observation")
        and "after 10 s" in reason
    )
    assert state.let_go("nobody", 100.0) == "", "never held: nothing to re-open"


def test_an_observation_sent_restarts_the_quiet_time():
    state = opened(idle_timeout_s=10.0)
    state.hold("operator", 1.0)
    state.observation_sent(4.0)
    assert state.let_go("operator", 8.0) == ""


def test_a_server_that_never_closes_idle_sessions_is_never_re_opened_for_quiet():
    state = opened(idle_timeout_s=math.inf)
    state.hold("operator", 1.0)
    assert state.let_go("operator", 1e9) == ""
