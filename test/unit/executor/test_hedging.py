"""Zero-gap failover in plain Python: the hedge deadline, the race of a hedged request, the warm
standby's arming, promotion and replacement, against a fake fleet (``HedgeFleet``) and the
product's own core, worker and standby keeper."""

from __future__ import annotations

import threading
import time

import pytest

from lerobot_ros.executor.fleet.hedging import MIN_SAMPLES, hedge_allowance_s, hedge_deadline_s
from lerobot_ros.executor.fleet.standby_keeper import arm_standby
from lerobot_ros.executor.requests.answer_rules import InFlight, ValidatedModel
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.trigger import request_threshold_s
from lerobot_ros.protocol.wire.data_plane import RequestId
from support.executor_harness import CAPABILITIES, chunk, counts, feed, heartbeat
from support.fake_fleet import ROBOT, fleet, serve

CAPABILITIES_MODEL = ValidatedModel.of(CAPABILITIES)


# ------------------------------------------------------------------ the rules


def test_the_hedge_deadline_follows_the_windowed_round_trip():
    assert hedge_deadline_s(0.05, MIN_SAMPLES - 1, 2.0, 0.1, 1.0) is None, (
        "nothing measured to derive it from"
    )
    assert hedge_deadline_s(0.2, MIN_SAMPLES, 2.0, 0.1, 1.0) == pytest.approx(0.4)
    assert hedge_deadline_s(0.01, 50, 2.0, 0.1, 1.0) == pytest.approx(0.1), (
        "jitter of a fast round trip: the floor"
    )
    assert hedge_deadline_s(0.6, 50, 2.0, 0.1, 1.0) is None, (
        "at the request timeout a hedge is no hedge"
    )
    assert hedge_allowance_s(None, 0.2) == 0.0 and hedge_allowance_s(0.4, 0.2) == pytest.approx(
        0.6
    )


def test_the_trigger_leaves_room_for_a_hedge_within_its_caps():
    plain = request_threshold_s(0.25, 0.2, 1.5, 10.0, chunk_size=10)
    hedged = request_threshold_s(0.25, 0.2, 1.5, 10.0, chunk_size=10, hedge_allowance_s=0.6)
    assert plain == pytest.approx(0.4) and hedged == pytest.approx(0.7)
    # Near a chunk's duration the cap wins: a hedge may then land late (the docs say what that
    # costs).
    assert request_threshold_s(
        0.25, 0.2, 1.5, 10.0, chunk_size=5, hedge_allowance_s=0.9
    ) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="hedge_allowance_s"):
        request_threshold_s(0.25, 0.2, 1.5, 10.0, chunk_size=10, hedge_allowance_s=float("nan"))


def request(session: str, seq: int, epoch: int = 0) -> RequestId:
    return RequestId(session, "arm", seq, 0, epoch, 1000 + seq)


def test_the_first_valid_answer_of_a_race_wins_and_the_other_is_dropped_as_lost():
    flight = InFlight()
    primary, hedge = request("s1", 1), request("s2", 2, epoch=1)
    flight.start(primary, CAPABILITIES_MODEL)
    assert flight.wait(0.01, end=False) is None, (
        "a timeout without end leaves the request in flight"
    )
    assert flight.hedge(hedge)
    assert flight.offer_chunk(chunk(hedge), 5) is None
    answer = flight.wait(1.0)
    assert answer.chunk is not None and answer.request == hedge
    assert flight.offer_chunk(chunk(primary), 6) == "hedge_lost"
    # the next request is already in flight
    flight.start(request("s2", 3, epoch=1), CAPABILITIES_MODEL)
    assert flight.offer_chunk(chunk(primary), 7) == "hedge_lost", "still known as the race's loser"
    assert flight.drops().counts == {"hedge_lost": 2}


def test_one_refusal_does_not_end_a_race_and_nothing_is_hedged_after_an_answer():
    flight = InFlight()
    primary, hedge = request("s1", 1), request("s2", 2)
    flight.start(primary, CAPABILITIES_MODEL)
    flight.hedge(hedge)
    assert flight.offer_chunk(chunk(primary, status=1, error="busy"), 5) == "refused"
    assert not flight.answered, "the hedge may still answer"
    assert flight.offer_chunk(chunk(hedge, status=1, error="full"), 6) == "refused"
    answer = flight.wait(1.0)
    assert answer.chunk is None and "busy" in answer.refusal and "full" in answer.refusal
    following = request("s1", 4)
    flight.start(following, CAPABILITIES_MODEL)
    flight.offer_chunk(chunk(following), 5)
    assert not flight.hedge(request("s2", 5)), "answered already: nothing to hedge"


def test_the_standby_goes_to_the_least_loaded_other_replica_and_is_reported():
    clock, core, link, worker = fleet()
    assert core.standby_wanted(clock()) == ""
    assert arm_standby(core, link, ROBOT, clock) == "standby session opened on /c"
    assert link.opened[-1] == ("/c", True) and core.standby.replica == "/c"
    assert core.standby_wanted(clock()) is None, "one armed: none wanted"
    status = counts(core, clock)
    assert status.standby_replica == "/c" and status.server_namespace == "/a"
    assert status.hedge_deadline_ms == 0.0, "nothing measured yet: no deadline"
    serve(core, worker, clock, 5)
    assert counts(core, clock).hedge_deadline_ms == pytest.approx(100.0)


def test_no_standby_without_another_replica_says_why_and_waits_before_trying_again():
    clock, core, link, worker = fleet()
    link.silent |= {"/b", "/c"}
    reason = arm_standby(core, link, ROBOT, clock)
    assert "/b: no policy server answered" in reason and core.standby is None
    assert core.snapshot(clock()).standby_problem == reason
    assert core.standby_wanted(clock()) is None, "retried later, not at once"
    clock.t += 2.5
    assert core.standby_wanted(clock()) == ""


def test_a_killed_replica_s_late_answer_is_hedged_to_the_standby_which_takes_the_robot():
    clock, core, link, worker = fleet()
    arm_standby(core, link, ROBOT, clock)
    serve(core, worker, clock, 5)
    link.silent.add("/a")  # kill -9: no answer, no goodbye
    begin = time.monotonic()
    serve(core, worker, clock)
    took = time.monotonic() - begin
    status = counts(core, clock)
    assert core.identity.replica == "/c" and status.chunks_merged == 6
    assert (status.hedges_sent, status.hedges_won, status.standby_promotions) == (1, 1, 1)
    assert status.request_timeouts == 0 and status.replica_moves == 1
    assert status.last_move_reason.startswith(
        "/a -> /c: hedged request answered first by the standby"
    )
    assert took < 0.6, (
        f"answered {took:.2f} s after the request: the 0.1 s deadline, not the 1 s timeout"
    )
    hedge_session = link.sent[-1][1]
    assert link.sent[-2:] == [("/a", link.sent[-2][1]), ("/c", hedge_session)]
    assert core.identity.session_id == hedge_session, "the standby session is the session now"
    assert core.standby is None and core.standby_wanted(clock()) == "", (
        "a new standby is wanted at once"
    )
    assert arm_standby(core, link, ROBOT, clock) == "standby session opened on /b", (
        "/a answers nothing"
    )


def test_when_the_serving_replica_answers_first_the_hedge_s_answer_is_dropped_and_the_standby_re_armed():  # noqa: E501 - the test's id names what it checks
    clock, core, link, worker = fleet()
    arm_standby(core, link, ROBOT, clock)
    serve(core, worker, clock, 5)
    # both late past the 0.1 s deadline, the serving one less
    link.after.update({"/a": 0.2, "/c": 0.5})
    serve(core, worker, clock)
    status = counts(core, clock)
    assert core.identity.replica == "/a" and (status.hedges_sent, status.hedges_won) == (1, 0)
    time.sleep(0.6)
    assert counts(core, clock).hedge_answers_dropped == 1, "the standby's answer came second"
    assert core.standby_wanted(clock()) == "/c", "its server made it an ordinary session: re-armed"
    assert arm_standby(core, link, ROBOT, clock) == "standby session opened on /c"
    assert link.opened[-1] == ("/c", True) and core.standby.usable(clock(), 2.0)


def test_a_lost_replica_promotes_the_standby_without_a_placement():
    clock, core, link, worker = fleet(heartbeat_timeout_s=1.0)
    arm_standby(core, link, ROBOT, clock)
    serve(core, worker, clock, 2)
    rounds = link.status_rounds
    link.silent.add("/a")
    clock.t += 1.1  # /a's heartbeat falls silent; /c's still beats
    core.on_heartbeat(heartbeat("i/c"), clock(), "/c")
    core.control_tick(clock())
    assert core.state is ExecutorState.RECONNECTING
    assert (
        worker.step() and core.identity.replica == "/c" and core.state is ExecutorState.STREAMING
    )
    assert link.status_rounds == rounds, "no GetStatus round: the standby was ready"
    assert counts(core, clock).standby_promotions == 1
    assert "server heartbeat silent" in counts(core, clock).last_move_reason
    # Gone from the graph: lost at once, without waiting for the heartbeat timeout.
    serve(core, worker, clock)
    arm_standby(core, link, ROBOT, clock)
    assert core.standby.replica == "/b"
    core.replica_left_graph("/c", clock())
    assert core.state is ExecutorState.RECONNECTING
    assert worker.step() and core.identity.replica == "/b"
    assert "/c left the ROS graph" in counts(core, clock).last_move_reason
    # A drained server leaves the graph after delivering what it owed: the move names the drain.
    serve(core, worker, clock)
    arm_standby(core, link, ROBOT, clock)
    core.on_heartbeat(heartbeat("i/b", draining=True), clock(), "/b")
    core.replica_left_graph("/b", clock())
    assert worker.step() and "announced a drain" in counts(core, clock).last_move_reason


def test_a_standby_whose_replica_restarts_or_drains_is_dropped_and_replaced():
    clock, core, link, worker = fleet()
    serve(core, worker, clock)
    arm_standby(core, link, ROBOT, clock)
    core.on_heartbeat(heartbeat("another"), clock(), "/c")
    assert core.standby is None and "restarted" in core.snapshot(clock()).standby_problem
    arm_standby(core, link, ROBOT, clock)
    core.on_heartbeat(heartbeat("i/c", draining=True), clock(), "/c")
    assert core.standby is None and "draining" in core.snapshot(clock()).standby_problem
    # A standby on the replica a re-handshake lands on was replaced by that session there.
    arm_standby(core, link, ROBOT, clock)
    clock.t += 10.0
    core.on_heartbeat(heartbeat("i/c"), clock(), "/c")
    link.load.update({"/b": 4})
    core.replica_left_graph("/a", clock())
    assert worker.step() and core.identity.replica == "/c" and core.standby is None


def test_the_trigger_rises_for_the_hedge_while_a_standby_is_armed():
    clock, core, link, worker = fleet(latency_s=0.2)
    serve(core, worker, clock, 5)
    assert core.request_threshold_s == pytest.approx(0.4), "p95 0.2 s x 1.5 + one step"
    arm_standby(core, link, ROBOT, clock)
    assert core.request_threshold_s == pytest.approx(0.7), (
        "deadline 0.4 s + a round trip 0.2 s + one step"
    )
    core.on_heartbeat(heartbeat("another"), clock(), "/c")
    assert core.request_threshold_s == pytest.approx(0.4)


def test_a_hedge_racing_when_the_heartbeat_times_out_is_not_cancelled_and_its_answer_moves_the_robot():  # noqa: E501 - the test's id names what it checks
    clock, core, link, worker = fleet(heartbeat_timeout_s=1.0)
    arm_standby(core, link, ROBOT, clock)
    serve(core, worker, clock, 5)
    link.silent.add("/a")  # killed
    link.after["/c"] = 0.4  # the standby answers, but late (a loaded machine)
    feed(core, clock)
    core.clear_queue()
    stepping = threading.Thread(target=worker.step, daemon=True)
    stepping.start()
    deadline = time.monotonic() + 2.0
    while counts(core, clock).hedges_sent == 0 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert counts(core, clock).hedges_sent == 1
    clock.t += 1.1  # /a's heartbeat times out while the hedge is on its way
    core.on_heartbeat(heartbeat("i/c"), clock(), "/c")
    core.control_tick(clock())
    assert core.state is ExecutorState.RECONNECTING
    stepping.join(3.0)
    status = counts(core, clock)
    assert core.identity.replica == "/c" and core.state is ExecutorState.STREAMING
    assert (status.hedges_won, status.chunks_merged, status.request_timeouts) == (1, 6, 0), status
