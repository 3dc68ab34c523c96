"""Rebalancing in plain Python: the move rules (no oscillation, a move from an overloaded replica,
capacity from the server's model), staggering across a fleet of robots, and a move carried out by
the product's own core and worker between two requests, against a fake fleet
(``support.fake_fleet``)."""

from __future__ import annotations

import random
import threading
import time

import pytest

from lerobot_ros.executor.fleet.rebalancing import (
    Load,
    decide,
    moves_needed,
    next_look_s,
    rebalance_once,
)
from lerobot_ros.executor.fleet.standby_keeper import arm_standby
from lerobot_ros.executor.session.handshake_types import ServerView
from support.executor_harness import CAPABILITIES, counts, heartbeat
from support.fake_fleet import ROBOT, fleet, serve


def view(
    sessions: int,
    standbys: int = 0,
    max_sessions: int = 0,
    headroom: int = -1,
    p95_ms: float = 0.0,
    budget_ms: float = 0.0,
    draining: bool = False,
    ready: bool = True,
) -> ServerView:
    return ServerView(
        ready,
        "i",
        CAPABILITIES,
        draining=draining,
        active_sessions=sessions,
        max_sessions=max_sessions,
        standby_sessions=standbys,
        headroom_robots=headroom,
        predicted_p95_ms=p95_ms,
        latency_budget_ms=budget_ms,
    )


def fleet_views(**sessions) -> list[tuple[str, ServerView]]:
    return [
        (f"/{name}", each if isinstance(each, ServerView) else view(each))
        for name, each in sessions.items()
    ]


# ------------------------------------------------------------------ the rules


def test_load_counts_serving_robots_over_the_capacity_the_server_knows():
    assert Load.of(view(5, standbys=2, headroom=3)) == Load(3, 6.0, False, 3), "serving + headroom"
    assert Load.of(view(4, max_sessions=8)) == Load(4, 8.0, False, -1), (
        "no capacity model: the session limit"
    )
    assert Load.of(view(4)).capacity is None
    assert Load.of(view(2, headroom=0, p95_ms=120.0, budget_ms=100.0)).over_budget


def test_two_equal_replicas_never_trade_a_robot_back_and_forth():
    assert moves_needed(Load(3, None, False, -1), Load(0, None, False, -1)) == 1, "3/0 -> 2/1"
    assert moves_needed(Load(6, None, False, -1), Load(0, None, False, -1)) == 3, "6/0 -> 3/3"
    for serving in range(0, 12):
        for other in range(0, 12):
            there = moves_needed(Load(serving, 8.0, False, -1), Load(other, 8.0, False, -1))
            back = moves_needed(
                Load(other + there, 8.0, False, -1), Load(serving - there, 8.0, False, -1)
            )
            assert there == 0 or back == 0, (
                f"{serving}/{other}: {there} moved, then {back} would move back"
            )
    # 3 robots on 2 replicas: from 3/0 one moves; at 2/1 nobody moves, on either side.
    assert decide("/a", fleet_views(a=3, b=0), ROBOT, None) is not None
    assert decide("/a", fleet_views(a=2, b=1), ROBOT, None) is None
    assert decide("/b", fleet_views(a=2, b=1), ROBOT, None) is None


def test_hysteresis_widens_the_dead_band():
    assert moves_needed(Load(4, 8.0, False, -1), Load(1, 8.0, False, -1)) == 1
    assert moves_needed(Load(4, 8.0, False, -1), Load(1, 8.0, False, -1), hysteresis=0.2) == 0, (
        "3/8 - 2/8 < 0.2"
    )
    assert moves_needed(Load(6, 8.0, False, -1), Load(1, 8.0, False, -1), hysteresis=0.2) == 1


def test_capacity_from_the_servers_model_weighs_a_bigger_replica():
    # /a: 4 robots with room for none more (capacity 4); /b: a bigger GPU, 2 robots with room for 6
    # more.
    move = decide("/a", fleet_views(a=view(4, headroom=0), b=view(2, headroom=6)), ROBOT, None)
    assert (
        move is not None
        and move.target == "/b"
        and "serves 4 robots of 4, /b 2 of 8" in move.reason
    )
    # Counted as robots alone, 4/2 would be balanced: the capacities are what moves it.
    assert moves_needed(Load(4, None, False, -1), Load(2, None, False, -1)) == 1
    assert moves_needed(Load(4, 4.0, False, 0), Load(2, 8.0, False, 6)) == 2


def test_a_replica_over_its_latency_budget_gives_a_robot_to_one_with_headroom():
    over = view(3, headroom=0, p95_ms=180.0, budget_ms=100.0)
    move = decide("/a", fleet_views(a=over, b=view(3, headroom=2)), ROBOT, None)
    assert move is not None and move.target == "/b" and move.chance == pytest.approx(1 / 3)
    assert (
        "over its latency budget (predicted p95 180 ms > 100 ms), /b has room for 2 more"
        in move.reason
    )
    assert decide("/a", fleet_views(a=over, b=view(3, headroom=0)), ROBOT, None) is None, (
        "nowhere with room"
    )


def test_no_move_from_a_lost_or_draining_replica_nor_to_a_draining_full_or_unanswered_one():
    assert (
        decide("/a", [("/a", "no policy server answered"), ("/b", view(0))], ROBOT, None) is None
    )
    assert decide("/a", fleet_views(a=view(3, draining=True), b=0), ROBOT, None) is None
    assert decide("/a", fleet_views(a=3, b=view(0, draining=True)), ROBOT, None) is None
    assert (
        decide(
            "/a", fleet_views(a=view(3, max_sessions=4), b=view(4, max_sessions=4)), ROBOT, None
        )
        is None
    )
    assert decide("/a", fleet_views(a=3, b=0), ROBOT, None, unanswered=frozenset({"/b"})) is None
    move = decide("/a", fleet_views(a=4, b=3, c=0), ROBOT, None)
    assert move is not None and move.target == "/c", "the least loaded of those that qualify"


# ------------------------------------------------------------------ staggering across a fleet


def test_a_new_replica_receives_robots_one_after_another_never_the_whole_fleet():
    """Six robots on /a, /b comes up empty. Each robot looks at its own random phase, on the counts
    the earlier moves left, and moves with the chance that makes one look's expected movers the
    moves needed."""
    for seed in range(50):
        rng = random.Random(seed)
        where = ["/a"] * 6
        looks = sorted(
            (rng.uniform(0.0, 5.0) + k * 5.0, robot) for robot in range(6) for k in range(8)
        )
        moves_of = [0] * 6
        history = []
        for _, robot in looks:
            count = {name: where.count(name) for name in ("/a", "/b")}
            move = decide(where[robot], fleet_views(a=count["/a"], b=count["/b"]), ROBOT, None)
            if move is not None and rng.random() < move.chance:
                where[robot] = move.target
                moves_of[robot] += 1
                history.append((where.count("/a"), where.count("/b")))
        assert sorted((where.count("/a"), where.count("/b"))) == [3, 3], (seed, history)
        assert max(moves_of) == 1, f"seed {seed}: a robot moved twice: {history}"
        assert len(history) == 3, "each move one robot, each on fresh counts"


def test_robots_looking_at_the_same_moment_move_as_many_as_needed_on_average():
    movers = []
    rng = random.Random(7)
    for _ in range(2000):
        move = decide("/a", fleet_views(a=6, b=0), ROBOT, None)
        movers.append(sum(rng.random() < move.chance for _ in range(6)))
    assert sum(movers) / len(movers) == pytest.approx(3.0, abs=0.1), (
        "not all six at once: three expected"
    )
    phases = [next_look_s(5.0, rng) for _ in range(1000)]
    assert 2.5 <= min(phases) and max(phases) < 7.5 and max(phases) - min(phases) > 4.5, (
        "spread over a period"
    )


# ------------------------------------------------------------------ a move by the core and the
# worker


def rebalancing_fleet(**overrides):
    clock, core, link, worker = fleet(rebalance_cooldown_s=10.0, **overrides)
    link.load.update({"/a": 3, "/b": 0, "/c": 3})
    return clock, core, link, worker


class Certain(random.Random):
    """This robot's draw always takes the move (the chance is tested above)."""

    def random(self) -> float:
        return 0.0


def run_look(core, link, worker, clock):
    """One rebalancing look on its own thread while the worker serves requests, as in the node."""
    outcome = []
    look = threading.Thread(
        target=lambda: outcome.append(rebalance_once(core, link, ROBOT, clock, Certain())),
        daemon=True,
    )
    look.start()
    deadline = time.monotonic() + 5.0
    while look.is_alive() and time.monotonic() < deadline:
        serve(core, worker, clock)
        time.sleep(0.005)
    look.join(1.0)
    assert not look.is_alive()
    return outcome[0]


def test_a_move_opens_the_target_as_a_standby_then_moves_between_requests_and_closes_the_old_session():  # noqa: E501 - the test's id names what it checks
    clock, core, link, worker = rebalancing_fleet(standby_session=False)
    serve(core, worker, clock, 3)
    assert run_look(core, link, worker, clock) == "", (
        "within the cooldown of the session's opening"
    )
    clock.t += 10.5
    old = core.identity.session_id
    outcome = run_look(core, link, worker, clock)
    assert outcome.startswith("moved to /b: rebalancing: /a serves 3 robots of 4, /b 0 of 4"), (
        outcome
    )
    status = counts(core, clock)
    assert core.identity.replica == "/b" and status.replica_moves == 1
    assert status.last_move_reason.startswith("/a -> /b: rebalancing")
    assert link.opened[-2:] == [("/b", True), ("/b", False)], (
        "opened there as a standby first (off the request path), re-opened as serving by the "
        "worker"
    )
    assert link.closed == [("/a", old)], (
        "the old session closed at once, not left to its idle timeout"
    )
    assert status.request_timeouts == 0 and status.starvation_ticks == 0
    serve(core, worker, clock)
    assert link.sent[-1] == ("/b", core.identity.session_id), (
        "the next request goes to the new replica"
    )
    link.load.update({"/a": 2, "/b": 1})
    assert run_look(core, link, worker, clock) == "", "cooldown after the move"
    clock.t += 10.5
    assert run_look(core, link, worker, clock) == "", "2/1: balanced, nothing moves back"


def test_a_standby_already_on_the_target_is_promoted_without_opening_anything():
    clock, core, link, worker = rebalancing_fleet()
    link.load.update({"/c": 4})
    assert arm_standby(core, link, ROBOT, clock) == "standby session opened on /b"
    opened = len(link.opened)
    serve(core, worker, clock, 2)
    clock.t += 10.5
    core.on_heartbeat(heartbeat("i/b"), clock(), "/b")  # the standby's replica still beats
    outcome = run_look(core, link, worker, clock)
    assert outcome.startswith("moved to /b"), outcome
    assert link.opened[opened:] == [("/b", False)], (
        "no new standby: the one there re-opened as serving"
    )
    assert core.identity.replica == "/b"
    status = counts(core, clock)
    assert status.replica_moves == 1 and status.last_move_reason.startswith(
        "/a -> /b: rebalancing"
    )
    assert core.standby_wanted(clock()) == "", "a new standby is wanted once the move is over"


def test_a_move_whose_target_refuses_is_reported_and_waits_out_the_cooldown():
    clock, core, link, worker = rebalancing_fleet(standby_session=False)
    serve(core, worker, clock)
    clock.t += 10.5
    original_open = link.open_standby
    link.open_standby = lambda namespace, timeout_s, check: (
        "session refused: full (latency budget)"
    )
    outcome = run_look(core, link, worker, clock)
    assert outcome == "rebalancing to /b failed: session refused: full (latency budget)"
    assert core.identity.replica == "/a" and core.rebalance_wanted(clock()) == ""
    link.open_standby = original_open
    clock.t += 10.5
    assert core.rebalance_wanted(clock()) == "/a"


def test_a_move_no_longer_worth_it_when_the_worker_gets_to_it_is_abandoned():
    """Another robot moved between this robot's look and its worker's gap: the worker asks again
    and stays."""
    clock, core, link, worker = rebalancing_fleet()
    assert arm_standby(core, link, ROBOT, clock) == "standby session opened on /b"
    serve(core, worker, clock)
    clock.t += 10.5
    core.on_heartbeat(heartbeat("i/b"), clock(), "/b")
    assert core.begin_move("/b", "rebalancing: /a serves 3 robots of 4, /b 0 of 4", clock())
    core.move_ready()
    link.load.update({"/a": 2, "/b": 1})  # meanwhile another robot of /a moved to /b
    logged = []
    worker.log = logged.append
    assert worker.step()
    assert logged == ["rebalancing move to /b abandoned: no longer worth it on the counts now"]
    assert (
        core.move_outcome() == ()
        and core.identity.replica == "/a"
        and link.opened[-1] == ("/b", True)
    )
    assert "no longer worth it" in core.snapshot(clock()).last_problem


def test_without_a_kept_standby_a_session_opened_for_an_abandoned_move_is_closed():
    clock, core, link, worker = rebalancing_fleet(standby_session=False)
    serve(core, worker, clock)
    clock.t += 10.5
    ask = link.get_statuses

    def counts_change_after_the_look(namespaces, timeout_s):
        answers = ask(namespaces, timeout_s)
        link.load.update({"/a": 2, "/b": 1})  # another robot moved once this look had its answers
        return answers

    link.get_statuses = counts_change_after_the_look
    assert run_look(core, link, worker, clock) == "rebalancing to /b abandoned"
    opened_for_move = next(grant for replica, grant in link.closed if replica == "/b")
    assert core.identity.replica == "/a" and core.standby is None and opened_for_move
