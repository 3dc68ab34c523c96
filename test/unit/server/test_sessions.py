"""Session registry: replacement, identity-checked removal, episodes and expiry (no ROS)."""

import threading

from lerobot_ros.server.sessions import PUBLISHER_GONE_GRACE_S, EpisodeMove, EpisodeReset, Session, SessionRegistry


def session(client="arm", opened=0.0):
    return Session(client, task="", fps=30.0, rtc_enabled=False, opened_at=opened)


def test_reopening_replaces_without_counting_twice():
    registry = SessionRegistry()
    first, second = session(), session()
    assert registry.open(first) is None
    assert registry.open(second) is first
    assert registry.count() == 1
    assert registry.count(excluding_client="arm") == 0
    assert registry.get("arm") is second


def test_removal_of_an_old_session_never_removes_its_replacement():
    registry = SessionRegistry()
    old, new = session(), session()
    registry.open(old)
    registry.open(new)
    assert registry.remove("arm", old.session_id) is None
    assert registry.get("arm") is new
    assert registry.remove("arm", new.session_id) is new
    assert registry.get("arm") is None


def test_idle_sessions_are_found_by_last_observation():
    registry = SessionRegistry()
    quiet, busy = session("quiet", opened=0.0), session("busy", opened=0.0)
    registry.open(quiet)
    registry.open(busy)
    busy.last_seen = 9.0
    assert [s.client_id for s in registry.idle(now=10.0, idle_timeout_s=5.0)] == ["quiet"]


def test_a_named_session_or_the_refusal_that_says_which_is_open():
    registry = SessionRegistry()
    open_one = session()
    registry.open(open_one)
    assert registry.named("arm", open_one.session_id) == (open_one, "")
    found, why = registry.named("arm", "stale")
    assert found is None
    assert why == f"no open session 'stale' for client 'arm' (its open session is {open_one.session_id!r})"
    assert registry.named("ghost", "x") == (None, "no open session 'x' for client 'ghost'")


def test_a_new_session_has_its_processors_reset_once_before_its_first_request():
    registry = SessionRegistry()
    fresh = session()
    registry.open(fresh)
    assert registry.claim_processor_reset(fresh) is True
    assert registry.claim_processor_reset(fresh) is False


def test_reset_episode_is_idempotent_refuses_older_and_advances_newer():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    registry.claim_processor_reset(current)
    assert registry.reset_episode("arm", current.session_id, 0) == EpisodeReset(True, 0)
    assert registry.claim_processor_reset(current) is False, "the same episode again resets nothing"
    assert registry.reset_episode("arm", current.session_id, 3) == EpisodeReset(True, 3)
    assert current.episode == 3 and registry.claim_processor_reset(current) is True
    assert registry.reset_episode("arm", current.session_id, 3) == EpisodeReset(True, 3)
    assert registry.reset_episode("arm", current.session_id, 2) == EpisodeReset(
        False, 3, "episode 2 is not after the current episode 3"
    )
    assert current.episode == 3 and registry.claim_processor_reset(current) is False


def test_reset_episode_of_a_session_that_is_not_open_is_refused_with_why():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    reset = registry.reset_episode("arm", "old_session", 1)
    assert not reset.success and reset.message.startswith("no open session 'old_session' for client 'arm'")
    assert current.episode == 0


def test_an_observation_advances_the_episode_through_the_same_rule():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    assert registry.advance_episode(current, 0) == (EpisodeMove.CURRENT, 0)
    assert registry.advance_episode(current, 2) == (EpisodeMove.ADVANCED, 2)
    assert registry.advance_episode(current, 1) == (EpisodeMove.OVER, 2)
    assert current.episode == 2


def test_concurrent_episode_moves_never_go_backwards():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    seen = []

    def mover(episodes):
        for episode in episodes:
            move, now = registry.advance_episode(current, episode)
            seen.append((episode, move, now))

    threads = [threading.Thread(target=mover, args=(range(start, 2000, 4),)) for start in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert current.episode == 1999
    for episode, move, now in seen:
        if move is EpisodeMove.OVER:
            assert episode < now
        else:
            assert episode == now, "an accepted move lands exactly on the episode asked for"


def test_an_observation_keeps_its_session_from_going_idle():
    registry = SessionRegistry()
    current = session(opened=0.0)
    registry.open(current)
    registry.observed("arm", 9.0)
    registry.observed("ghost", 9.0)  # no session: nothing to keep alive
    assert registry.expired(now=12.0, idle_timeout_s=5.0, publisher_count=lambda client: 1) == []
    assert registry.expired(now=15.0, idle_timeout_s=5.0, publisher_count=lambda client: 1) == [
        (current, "no observation for 5 s")
    ]


def test_a_publisher_gone_for_the_grace_period_expires_its_session():
    registry = SessionRegistry()
    current = session(opened=0.0)
    registry.open(current)
    publishers = {"arm": 0}

    def expired(now):
        current.last_seen = now  # never idle here
        return registry.expired(now, idle_timeout_s=5.0, publisher_count=publishers.get)

    assert expired(1.0) == [], "never seen yet: not connected, not gone"
    publishers["arm"] = 1
    assert expired(2.0) == []
    publishers["arm"] = 0
    assert expired(3.0) == []
    publishers["arm"] = 1
    assert expired(3.5) == [] and current.publisher_missing_since is None, "a blip does not count"
    publishers["arm"] = 0
    assert expired(4.0) == []
    assert expired(4.0 + PUBLISHER_GONE_GRACE_S - 0.1) == []
    (ended,) = expired(4.0 + PUBLISHER_GONE_GRACE_S)
    assert ended == (current, f"its observation publisher left the ROS graph {PUBLISHER_GONE_GRACE_S:g} s ago")


def test_an_idle_session_is_ended_once_not_also_as_publisher_gone():
    registry = SessionRegistry()
    current = session(opened=0.0)
    registry.open(current)
    current.publisher_seen, current.publisher_missing_since = True, 0.0
    asked = []
    ending = registry.expired(now=20.0, idle_timeout_s=5.0, publisher_count=lambda client: asked.append(client) or 0)
    assert ending == [(current, "no observation for 5 s")] and asked == []
