"""Session registry: ownership, replacement, identity-checked removal, admitted observations,
episodes and expiry (no ROS graph: real generated Observation messages)."""

import threading

from hypothesis import given
from hypothesis import strategies as st

from lerobot_ros.msg import Observation
from lerobot_ros.protocol.wire.data_plane import integrity
from lerobot_ros.server.sessions.registry import (
    PUBLISHER_GONE_GRACE_S,
    EpisodeMove,
    EpisodeReset,
    Session,
    SessionRegistry,
)


def session(client="arm", opened=0.0):
    return Session(client, task="", fps=30.0, rtc_enabled=False, opened_at=opened)


def observation(
    of: Session, seq: int, epoch: int = 0, key: bytes | None = None, **fields
) -> Observation:
    msg = Observation(
        session_id=of.session_id,
        client_id=of.client_id,
        seq=seq,
        epoch=epoch,
        state=[0.0] * 6,
        **fields,
    )
    integrity.sign(msg, of.key if key is None else key)
    return msg


def streaming(registry: SessionRegistry, client="arm", opened=0.0, now=1.0) -> Session:
    live = session(client, opened)
    registry.open(live)
    assert registry.admit_observation(client, observation(live, 1), now) is None
    return live


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


def test_an_owned_session_needs_its_id_and_secret_and_a_refusal_never_names_the_open_one():
    registry = SessionRegistry()
    open_one = session()
    registry.open(open_one)
    assert registry.owned("arm", open_one.session_id, open_one.secret) == (open_one, "")
    refusals = [
        registry.owned("arm", "stale", open_one.secret),
        registry.owned("arm", open_one.session_id, ""),
        registry.owned("arm", open_one.session_id, "0" * 32),
        registry.owned("ghost", "x", ""),
    ]
    assert all(found is None for found, _ in refusals)
    assert refusals[0][1] == "client 'arm' has no open session 'stale' that this secret opens"
    assert refusals[1][1] == refusals[2][1], (
        "a wrong secret and a missing one read the same: no oracle"
    )
    for _, why in refusals:
        assert open_one.secret not in why and (
            open_one.session_id not in why or why == refusals[1][1]
        )


def test_each_session_gets_its_own_unguessable_secret():
    secrets = {session().secret for _ in range(200)}
    assert len(secrets) == 200 and all(len(secret) == 32 for secret in secrets)


def test_a_streaming_client_id_is_in_use_unless_the_open_proves_ownership():
    registry = SessionRegistry()
    live = streaming(registry, now=1.0)
    squatter = session()
    claim = registry.claim(squatter, owner_secret="", now=2.0, idle_timeout_s=10.0)
    assert claim.replaced is None and registry.get("arm") is live
    assert claim.refusal.startswith("client id 'arm' is in use by a session that is streaming")
    assert live.secret not in claim.refusal and live.session_id not in claim.refusal
    assert registry.claim(
        session(), owner_secret="f" * 32, now=2.0, idle_timeout_s=10.0
    ).refusal, "a wrong secret"
    owner = session(opened=3.0)
    assert (
        registry.claim(owner, owner_secret=live.secret, now=3.0, idle_timeout_s=10.0).replaced
        is live
    )
    assert registry.get("arm") is owner


def test_a_client_id_frees_once_its_session_is_quiet_for_the_idle_bound_or_its_publisher_left():
    registry = SessionRegistry()
    live = streaming(registry, now=1.0)
    assert registry.claim(session(), "", now=11.0, idle_timeout_s=10.0).refusal
    assert registry.claim(session(), "", now=11.5, idle_timeout_s=10.0).replaced is live
    gone = streaming(registry, client="other", now=1.0)
    gone.publisher_seen, gone.publisher_missing_since = True, 1.5
    assert registry.claim(session("other"), "", now=2.0, idle_timeout_s=10.0).replaced is gone


def test_a_session_that_never_streamed_is_replaceable_and_reopening_never_extends_it():
    registry = SessionRegistry()
    first = session(opened=0.0)
    registry.open(first)
    again = session(opened=4.0)
    assert (
        registry.claim(again, owner_secret=first.secret, now=4.0, idle_timeout_s=10.0).replaced
        is first
    )
    assert again.opened_at == 0.0, "the replacement keeps the first opening time"
    by_anyone = session(opened=4.5)
    assert (
        registry.claim(by_anyone, owner_secret="", now=4.5, idle_timeout_s=10.0).replaced is again
    )
    assert registry.expired(5.1, 10.0, lambda client: 0, first_observation_timeout_s=5.0) == [
        (by_anyone, "no observation within 5 s of opening")
    ]


def test_the_capacity_hint_names_when_the_earliest_unused_session_is_collected():
    registry = SessionRegistry()
    streaming(registry, client="busy", opened=0.0)
    assert (
        registry.next_slot_free_s(now=2.0, first_observation_timeout_s=5.0, idle_timeout_s=10.0)
        is None
    )
    registry.open(session("idle_a", opened=1.0))
    registry.open(session("idle_b", opened=3.0))
    assert (
        registry.next_slot_free_s(now=2.0, first_observation_timeout_s=5.0, idle_timeout_s=10.0)
        == 4.0
    )
    assert (
        registry.next_slot_free_s(now=2.0, first_observation_timeout_s=5.0, idle_timeout_s=3.0)
        == 2.0
    )
    assert (
        registry.next_slot_free_s(now=9.0, first_observation_timeout_s=5.0, idle_timeout_s=10.0)
        == 0.0
    )


def test_an_admitted_observation_names_the_open_session_verifies_and_moves_seq_forward():
    registry = SessionRegistry()
    live = session()
    registry.open(live)
    assert registry.admit_observation("arm", observation(live, 5, epoch=2), 1.0) is None
    assert live.last_seen == 1.0 and live.streamed
    refused = {
        "replayed": registry.admit_observation("arm", observation(live, 5, epoch=2), 2.0),
        "backwards": registry.admit_observation("arm", observation(live, 4, epoch=2), 2.0),
        "other epoch": registry.admit_observation("arm", observation(live, 6, epoch=3), 2.0),
        "forged": registry.admit_observation(
            "arm", observation(live, 6, epoch=2, key=b"guess"), 2.0
        ),
        "unsigned": registry.admit_observation(
            "arm", Observation(session_id=live.session_id, client_id="arm", seq=7, epoch=2), 2.0
        ),
        "other session": registry.admit_observation(
            "arm", Observation(session_id="bogus", seq=7), 2.0
        ),
        "no session": registry.admit_observation("ghost", observation(live, 6, epoch=2), 2.0),
    }
    assert refused == {
        "replayed": "seq 5 replays or reorders: expected a seq greater than 5",
        "backwards": "seq 4 replays or reorders: expected a seq greater than 5",
        "other epoch": "epoch 3 is not this session's epoch 2",
        "forged": "Observation MAC does not verify with the session's key (forged or altered)",
        "unsigned": "Observation carries a 0-byte MAC; expected 32 bytes keyed by the session "
        "secret",
        "other session": "session id 'bogus' is not the open session of client 'arm'",
        "no session": "client 'ghost' has no open session",
    }
    assert live.last_seen == 1.0, "a refused observation keeps nothing alive"
    assert registry.admit_observation("arm", observation(live, 6, epoch=2), 3.0) is None


@given(st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=40))
def test_admitted_seqs_are_strictly_increasing_whatever_order_they_arrive_in(seqs):
    registry = SessionRegistry()
    live = session()
    registry.open(live)
    admitted = [
        seq
        for seq in seqs
        if registry.admit_observation("arm", observation(live, seq), 1.0) is None
    ]
    assert admitted == [
        seq for i, seq in enumerate(seqs) if all(seq > earlier for earlier in seqs[:i])
    ]


def test_a_new_session_has_its_processors_reset_once_before_its_first_request():
    registry = SessionRegistry()
    fresh = session()
    registry.open(fresh)
    assert registry.claim_processor_reset(fresh) is True
    assert registry.claim_processor_reset(fresh) is False


def test_reset_episode_must_name_a_later_episode():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    registry.claim_processor_reset(current)

    def reset(episode):
        return registry.reset_episode("arm", current.session_id, current.secret, episode)

    assert reset(0) == EpisodeReset(False, 0, "episode 0 is not after the current episode 0")
    assert registry.claim_processor_reset(current) is False, "a refused reset resets nothing"
    assert reset(3) == EpisodeReset(True, 3)
    assert current.episode == 3 and registry.claim_processor_reset(current) is True
    assert reset(3) == EpisodeReset(False, 3, "episode 3 is not after the current episode 3")
    assert reset(2) == EpisodeReset(False, 3, "episode 2 is not after the current episode 3")
    assert current.episode == 3 and registry.claim_processor_reset(current) is False


def test_a_reset_overtaken_by_its_episodes_observation_is_confirmed_once():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    assert registry.advance_episode(current, 1) == (EpisodeMove.ADVANCED, 1)
    assert registry.reset_episode("arm", current.session_id, current.secret, 1) == EpisodeReset(
        True, 1
    )
    assert not registry.reset_episode("arm", current.session_id, current.secret, 1).success


def test_reset_episode_of_a_session_not_owned_is_refused_with_why():
    registry = SessionRegistry()
    current = session()
    registry.open(current)
    reset = registry.reset_episode("arm", "old_session", current.secret, 1)
    assert reset == EpisodeReset(
        False, 0, "client 'arm' has no open session 'old_session' that this secret opens"
    )
    assert not registry.reset_episode("arm", current.session_id, "", 1).success, (
        "the id alone is not enough"
    )
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
    assert registry.admit_observation("arm", observation(current, 1), 9.0) is None
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
    assert ended == (
        current,
        f"its observation publisher left the ROS graph {PUBLISHER_GONE_GRACE_S:g} s ago",
    )


def test_an_idle_session_is_ended_once_not_also_as_publisher_gone():
    registry = SessionRegistry()
    current = session(opened=0.0)
    registry.open(current)
    current.publisher_seen, current.publisher_missing_since = True, 0.0
    asked = []
    ending = registry.expired(
        now=20.0, idle_timeout_s=5.0, publisher_count=lambda client: asked.append(client) or 0
    )
    assert ending == [(current, "no observation for 5 s")] and asked == []


# ---- warm standby sessions ---------------------------------------------------


def standby(client="arm", opened=0.0):
    return Session(client, task="", fps=30.0, rtc_enabled=False, opened_at=opened, standby=True)


def collect(registry, now, publishers, first_observation_timeout_s=5.0, idle_timeout_s=3.0):
    return registry.expired(
        now, idle_timeout_s, lambda client: publishers.get(client, 0), first_observation_timeout_s
    )


def test_a_standby_whose_robot_is_connected_outlives_the_first_observation_and_idle_timeouts():
    registry = SessionRegistry()
    waiting = standby(opened=0.0)
    registry.open(waiting)
    publishers = {"arm": 1}
    for now in (1.0, 6.0, 60.0, 3600.0):
        assert collect(registry, now, publishers) == []
    assert registry.get("arm") is waiting and waiting.standby and waiting.publisher_seen
    assert registry.idle(now=3600.0, idle_timeout_s=3.0) == []
    assert registry.count() == 1 and registry.standby_count() == 1
    assert (
        registry.next_slot_free_s(now=10.0, first_observation_timeout_s=5.0, idle_timeout_s=3.0)
        is None
    ), "no time collects a standby: it frees no slot by waiting"


def test_a_standby_whose_publisher_never_appeared_is_collected_after_the_first_observation_bound():
    registry = SessionRegistry()
    waiting = standby(opened=0.0)
    registry.open(waiting)
    assert collect(registry, 4.9, {}) == []
    assert collect(registry, 5.1, {}) == [
        (
            waiting,
            "standby: its observation publisher never appeared on the ROS graph within 5 s of "
            "opening",
        )
    ]


def test_a_standby_whose_publisher_left_is_collected_after_the_grace_period():
    registry = SessionRegistry()
    waiting = standby(opened=0.0)
    registry.open(waiting)
    publishers = {"arm": 1}
    assert collect(registry, 1.0, publishers) == []
    publishers["arm"] = 0
    assert collect(registry, 100.0, publishers) == [], "a blip: the grace period starts"
    assert collect(registry, 100.0 + PUBLISHER_GONE_GRACE_S - 0.1, publishers) == []
    assert collect(registry, 100.0 + PUBLISHER_GONE_GRACE_S, publishers) == [
        (
            waiting,
            f"its observation publisher left the ROS graph {PUBLISHER_GONE_GRACE_S:g} s ago "
            "(standby)",
        )
    ]


def test_the_first_admitted_observation_promotes_a_standby_to_an_ordinary_session():
    registry = SessionRegistry()
    waiting = standby(opened=0.0)
    registry.open(waiting)
    promoted = []
    forged = observation(waiting, 1, key=b"\0" * 32)
    assert registry.admit_observation("arm", forged, 50.0, promoted.append).kind == "mac"
    assert waiting.standby and promoted == [], "only an admitted observation promotes"
    assert (
        registry.admit_observation("arm", observation(waiting, 2), 50.0, promoted.append) is None
    )
    assert promoted == [waiting] and not waiting.standby and registry.standby_count() == 0
    assert (
        registry.admit_observation("arm", observation(waiting, 3), 51.0, promoted.append) is None
    )
    assert promoted == [waiting], "promoted once"
    # The ordinary rules from now on: idle after the idle bound, though its publisher is there.
    assert collect(registry, 53.0, {"arm": 1}) == []
    assert collect(registry, 54.5, {"arm": 1}) == [(waiting, "no observation for 3 s")]


def test_a_reopen_with_the_owners_secret_arms_a_streamed_session_as_a_standby_again():
    registry = SessionRegistry()
    # a promoted standby: it served a hedge the other replica won
    used = streaming(registry, now=1.0)
    assert registry.claim(
        standby(opened=2.0), owner_secret="", now=2.0, idle_timeout_s=3.0
    ).refusal, "a streaming session is not re-armed without its secret"
    rearmed = standby(opened=2.0)
    assert (
        registry.claim(rearmed, owner_secret=used.secret, now=2.0, idle_timeout_s=3.0).replaced
        is used
    )
    assert registry.get("arm") is rearmed and registry.standby_count() == 1
    assert (rearmed.opened_at, rearmed.session_id != used.session_id) == (2.0, True)
    assert collect(registry, 30.0, {"arm": 1}) == [], (
        "a standby again: no idle or first-observation collection"
    )


def test_a_standby_is_replaceable_like_any_session_that_never_streamed_and_hands_on_no_opening_time():  # noqa: E501 - the test's id names what it checks
    registry = SessionRegistry()
    waiting = standby(opened=0.0)
    registry.open(waiting)
    collect(registry, 1.0, {"arm": 1})
    # a robot re-placed here (a restarted executor, or a stranger)
    ordinary = session(opened=100.0)
    assert (
        registry.claim(ordinary, owner_secret="", now=100.0, idle_timeout_s=3.0).replaced
        is waiting
    )
    assert ordinary.opened_at == 100.0, (
        "a standby's long wait does not shorten its replacement's first bound"
    )
    assert collect(registry, 104.0, {"arm": 1}, idle_timeout_s=10.0) == []
    assert collect(registry, 105.5, {"arm": 1}, idle_timeout_s=10.0) == [
        (ordinary, "no observation within 5 s of opening")
    ]
    # ...and a standby replacing a session that never streamed starts its own bound too.
    unused = session("other", opened=0.0)
    registry.open(unused)
    late = standby("other", opened=4.0)
    assert registry.claim(late, owner_secret="", now=4.0, idle_timeout_s=3.0).replaced is unused
    assert late.opened_at == 4.0 and collect(registry, 8.5, {}) == []
