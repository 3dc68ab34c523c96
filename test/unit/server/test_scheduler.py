"""Newest-observation-wins mailboxes and fair round-robin (no ROS)."""

import threading
import time

from lerobot_ros.server.scheduler import RoundRobinScheduler


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
    assert all(b - a <= 11 for a, b in zip(gaps, gaps[1:]))


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
