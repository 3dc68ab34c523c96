"""Newest-observation-wins mailboxes and fair round-robin (no ROS)."""

import threading
import time

from lerobot_ros.server.requests.scheduler import RoundRobinScheduler


def test_newest_observation_wins_and_supersession_is_counted():
    scheduler = RoundRobinScheduler()
    assert scheduler.deposit("a", 1) is False
    assert scheduler.deposit("a", 2) is True
    assert scheduler.deposit("a", 3) is True
    ready = scheduler.take(0.1)
    assert (ready.key, ready.item, ready.superseded) == ("a", 3, 2)
    scheduler.deposit("a", 4)
    assert scheduler.take(0.1).superseded == 0  # the count was reported once
    assert scheduler.take(0.01) is None


def test_round_robin_serves_every_ready_session_before_any_twice():
    scheduler = RoundRobinScheduler()
    for key in "abc":
        scheduler.deposit(key, key)
    served = []
    for _ in range(9):
        ready = scheduler.take(0.1)
        served.append(ready.key)
        scheduler.deposit(ready.key, ready.key)  # every client republishes at once
    assert served == list("abcabcabc")


def test_a_flooding_client_cannot_starve_a_slow_one():
    scheduler = RoundRobinScheduler()
    served = []
    scheduler.deposit("slow", 0)
    for step in range(50):
        scheduler.deposit("fast", step)
        if step % 10 == 0:
            scheduler.deposit("slow", step)
        served.append(scheduler.take(0.1).key)
    # each slow observation is served at most one turn after it arrived
    assert served.count("slow") == 5
    gaps = [i for i, key in enumerate(served) if key == "slow"]
    assert all(b - a <= 11 for a, b in zip(gaps, gaps[1:], strict=False))


def test_take_waits_for_a_deposit_and_close_wakes_it():
    scheduler = RoundRobinScheduler()
    threading.Timer(0.05, scheduler.deposit, args=("a", "late")).start()
    started = time.monotonic()
    assert scheduler.take(5.0).item == "late"
    assert time.monotonic() - started < 4.0
    threading.Timer(0.05, scheduler.close).start()
    assert scheduler.take(5.0) is None


def test_remove_hands_the_waiting_observation_over_first_so_it_is_audited():
    # A session replaced or collected while its observation waited: the soak
    # found such requests missing from the audit log. The worker still gets
    # it (the request path answers it without inference) and forgets the session.
    scheduler = RoundRobinScheduler()
    scheduler.deposit("a", 1)
    scheduler.deposit("b", 2)
    scheduler.deposit("a", 3)  # supersedes 1
    assert scheduler.pending() == 2
    scheduler.remove("a")
    scheduler.remove("a")  # a second removal has nothing more to hand over
    assert scheduler.pending() == 2
    orphan = scheduler.take(0.1)
    assert (orphan.key, orphan.item, orphan.superseded) == ("a", 3, 1)
    assert scheduler.take(0.1).key == "b"
    assert scheduler.take(0.1) is None and scheduler.pending() == 0
    scheduler.deposit("a", 4)  # a new session of the same client starts a new mailbox
    assert scheduler.take(0.1).item == 4


def test_close_hands_back_every_observation_still_waiting():
    scheduler = RoundRobinScheduler()
    scheduler.deposit("a", 1)
    scheduler.deposit("b", 2)
    scheduler.remove("b")  # an orphan waiting for the worker
    scheduler.deposit("c", 3)
    waiting = scheduler.close()
    assert sorted((ready.key, ready.item) for ready in waiting) == [("a", 1), ("b", 2), ("c", 3)]
    assert scheduler.take(0.1) is None and scheduler.pending() == 0


# ---- micro-batching: take_batch -------------------------------------------


def test_a_batch_takes_distinct_sessions_in_round_robin_order_each_with_its_newest_observation():
    scheduler = RoundRobinScheduler(max_batch_size=3)
    for key in "abcde":
        scheduler.deposit(key, f"{key}0")
    scheduler.deposit("b", "b1")  # newest wins: b's batch entry is b1, one superseded
    first = scheduler.take_batch(0.1)
    assert [(r.key, r.item, r.superseded) for r in first] == [
        ("a", "a0", 0),
        ("b", "b1", 1),
        ("c", "c0", 0),
    ]
    for key in "ab":
        # served ones republish at once: they queue behind d and e
        scheduler.deposit(key, f"{key}2")
    second = scheduler.take_batch(0.1)
    assert [r.key for r in second] == ["d", "e", "a"]
    assert [r.key for r in scheduler.take_batch(0.1)] == ["b"]
    assert scheduler.take_batch(0.01) == []


def test_a_session_is_never_twice_in_one_batch_and_a_fast_one_cannot_crowd_out_others():
    scheduler = RoundRobinScheduler(max_batch_size=4)
    served = []
    for step in range(30):
        for _ in range(5):
            scheduler.deposit("fast", step)  # floods: only its newest is ever taken
        if step % 3 == 0:
            scheduler.deposit("slow", step)
        batch = scheduler.take_batch(0.1)
        keys = [ready.key for ready in batch]
        assert len(keys) == len(set(keys)), keys
        served.append(keys)
    slow_turns = [i for i, keys in enumerate(served) if "slow" in keys]
    assert slow_turns == list(range(0, 30, 3)), "every slow observation is in the very next batch"


def test_the_window_waits_for_more_sessions_and_a_newer_observation_still_wins():
    scheduler = RoundRobinScheduler(max_batch_size=3, batch_window_s=0.3)
    for key in "bc":  # known sessions, not ready now
        scheduler.deposit(key, key)
    scheduler.take_batch(0.1)
    scheduler.deposit("a", "a0")
    threading.Timer(0.05, scheduler.deposit, args=("b", "b0")).start()
    threading.Timer(0.1, scheduler.deposit, args=("a", "a1")).start()  # during the window
    started = time.monotonic()
    batch = scheduler.take_batch(1.0)
    waited = time.monotonic() - started
    assert [(r.key, r.item) for r in batch] == [("a", "a1"), ("b", "b0")]
    assert 0.25 <= waited < 2.0, "the window ran out without a third session"
    # A full batch does not wait for the window.
    for key in "xyz":
        scheduler.deposit(key, key)
    started = time.monotonic()
    assert len(scheduler.take_batch(1.0)) == 3 and time.monotonic() - started < 0.25


def test_a_lone_session_or_a_batch_of_every_known_session_does_not_wait_for_the_window():
    scheduler = RoundRobinScheduler(max_batch_size=8, batch_window_s=5.0)
    scheduler.deposit("a", "a0")
    started = time.monotonic()
    assert [r.key for r in scheduler.take_batch(1.0)] == ["a"]
    scheduler.deposit("b", "b0")
    scheduler.deposit("a", "a1")
    assert [r.key for r in scheduler.take_batch(1.0)] == ["a", "b"]
    assert time.monotonic() - started < 1.0


def test_a_session_removed_during_the_window_is_handed_over_as_an_orphan_not_batched():
    scheduler = RoundRobinScheduler(max_batch_size=2, batch_window_s=0.3)
    scheduler.deposit("b", "b0")
    scheduler.take_batch(0.1)  # b is known, so a's batch waits for it
    scheduler.deposit("a", "a0")
    threading.Timer(0.05, scheduler.remove, args=("a",)).start()
    assert scheduler.take_batch(1.0) == []  # its only member left
    orphan = scheduler.take_batch(0.1)
    assert [(r.key, r.item) for r in orphan] == [("a", "a0")]


def test_batch_parameters_are_checked():
    import pytest

    with pytest.raises(
        ValueError, match="max_batch_size must be >= 1 and batch_window_s >= 0; got 0 and 0.0"
    ):
        RoundRobinScheduler(max_batch_size=0)


def test_new_batch_bounds_apply_from_the_next_batch():
    import pytest

    scheduler = RoundRobinScheduler(max_batch_size=1)
    for key in "abc":
        scheduler.deposit(key, key)
    assert [r.key for r in scheduler.take_batch(0.1)] == ["a"]
    scheduler.set_batching(max_batch_size=2, batch_window_s=0.0)
    assert [r.key for r in scheduler.take_batch(0.1)] == ["b", "c"]
    with pytest.raises(ValueError, match="got 2 and -1"):
        scheduler.set_batching(2, -1)
