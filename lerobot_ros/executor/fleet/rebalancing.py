"""Rebalancing: when a placed robot moves to another replica for load, and the thread that looks.

Placement puts a robot on the least loaded replica when it opens a session;
without rebalancing it stays there until it has a reason to move, so the
replica that comes up first takes the whole fleet. Invariants:

* a move is decided on fresh answers only: one GetStatus round over every
  known replica, all asked at once (``status_round.py``);
* the target is a replica placement would take (``replicas.choose``: ready,
  not draining, the validated model, not full, its last session with this
  robot answered) with room for one more robot (``headroom_robots`` is not
  0); the current replica must have answered (a lost one is failover's job);
* a replica's load is its serving robots (sessions less standbys, which run
  nothing) over its capacity in robots: serving + ``headroom_robots`` when
  the server runs a capacity model (``latency_budget_ms`` set and measured),
  else ``max_sessions``; when either side's is unknown, robots are compared
  as counts;
* no oscillation: a move must leave the source at least as loaded as the
  target, plus ``rebalance_hysteresis``: ``(n_s - 1)/C_s - (n_t + 1)/C_t >=
  hysteresis``. The reverse move would then need the opposite, so two equal
  replicas never trade a robot back (3 robots on 2: 3/0 -> 2/1, and it stays
  there). A source over its latency budget (predicted p95 above it) gives
  robots to a replica with headroom whatever the counts;
* staggered: each robot looks at its own random phase (``period x U[0.5,
  1.5)``), moves with the chance that makes the expected number of movers
  of one look the number of moves needed (``moves_needed / n_s``; one robot
  per look when over budget), and stays ``rebalance_cooldown_s`` after any
  session opening. A new replica so receives robots one after another, each
  deciding on the counts the earlier moves left, never the whole fleet at once;
* a move happens between chunks and costs no gap: the session on the target
  is opened as a standby first (or is the standby already there: the slow
  part, matching its data plane, is done off the request path); then the
  network worker, between two requests, re-opens it as a serving session,
  makes it the session and closes the one left (``NetworkWorker.move``), so
  for other robots' looks the move is one step (both servers' counts change
  within a few milliseconds of each other).

Plain Python: the ROS calls go through the handshake's ``SessionOpener``
(and the link's standby calls), so tests drive it with a fake fleet.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lerobot_ros.executor.fleet.replicas import choose
from lerobot_ros.executor.requests.answer_rules import ValidatedModel
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView, SessionGrant

#: How often a rebalancer thread looks whether the worker carried out its move (seconds).
MOVE_POLL_S = 0.02
#: How a look that moved the robot begins its outcome (the worker logs the move itself).
MOVED_TO = "moved to"
#: Beyond the worker's own bounds, how long a planned move waits for it (seconds).
MOVE_WAIT_MARGIN_S = 1.0


@dataclass(frozen=True)
class Load:
    """A replica's load, from its GetStatus answer."""

    serving: int  # robots it runs forwards for (sessions less standbys)
    capacity: float | None  # in robots; None: unknown (no capacity model, no session limit)
    over_budget: bool  # its capacity model predicts a p95 above latency_budget_ms
    headroom: int  # more robots of the usual rate that fit the budget; -1: unknown

    @classmethod
    def of(cls, view: ServerView) -> Load:
        serving = max(0, view.active_sessions - view.standby_sessions)
        if view.headroom_robots >= 0:
            capacity: float | None = float(serving + view.headroom_robots)
        elif view.max_sessions > 0:
            capacity = float(view.max_sessions)
        else:
            capacity = None
        over = view.latency_budget_ms > 0 and view.predicted_p95_ms > view.latency_budget_ms
        return cls(serving, capacity, over, view.headroom_robots)


@dataclass(frozen=True)
class Move:
    """A move worth making: where to, why (for ~/status and the log), and the chance this robot
    takes it."""

    target: str
    reason: str
    chance: float


def moves_needed(source: Load, target: Load, hysteresis: float = 0.0) -> int:
    """The most robots that can go from ``source`` to ``target`` with the source left at least as
    loaded (plus ``hysteresis``); 0 when none can."""
    capacities = (source.capacity, target.capacity)
    c_s, c_t = capacities if None not in capacities and min(capacities) > 0 else (1.0, 1.0)
    moved = 0
    while (
        moved < source.serving
        and (source.serving - moved - 1) / c_s - (target.serving + moved + 1) / c_t
        >= hysteresis - 1e-9
    ):
        moved += 1
    return moved


def decide(
    current: str,
    views: Sequence[tuple[str, ServerView | str]],
    robot: RobotDeclaration,
    reference: ValidatedModel | None,
    hysteresis: float = 0.0,
    unanswered: frozenset[str] = frozenset(),
) -> Move | None:
    """The move this robot on ``current`` should consider now, or None (``views``: a fresh status
    round)."""
    answered = dict(views)
    here = answered.get(current)
    if not isinstance(here, ServerView) or here.draining or not here.ready:
        return (
            None  # a lost or draining replica: failover and drain move the robot, not rebalancing
        )
    source = Load.of(here)
    if source.serving <= 0:
        return None
    placement = choose(views, robot, reference, current, unanswered)
    best: tuple[tuple, Move] | None = None
    for namespace, view in placement.candidates:
        if namespace == current or namespace in unanswered:
            continue
        target = Load.of(view)
        if target.headroom == 0 or target.over_budget:
            continue
        if source.over_budget and target.headroom >= 1:
            move = Move(
                namespace,
                f"rebalancing: {current} is over its latency budget (predicted p95 "
                f"{here.predicted_p95_ms:.0f} ms > {here.latency_budget_ms:.0f} ms), {namespace} "
                f"has room for {target.headroom} more",
                1.0 / source.serving,
            )
        elif needed := moves_needed(source, target, hysteresis):
            move = Move(
                namespace,
                f"rebalancing: {current} serves {source.serving} robots"
                f"{_of(source)}, {namespace} {target.serving}{_of(target)}",
                min(1.0, needed / source.serving),
            )
        else:
            continue
        # most needed, then least loaded
        key = (
            -move.chance,
            (target.serving + 1) / (target.capacity or 1.0),
        )
        if best is None or key < best[0]:
            best = (key, move)
    return None if best is None else best[1]


def _of(load: Load) -> str:
    return (
        f" of {load.capacity:g}"
        if load.capacity is not None and math.isfinite(load.capacity)
        else ""
    )


def next_look_s(period_s: float, rng: random.Random) -> float:
    """The wait before a robot's next look: its own random phase, so robots of a fleet look one at
    a time."""
    return period_s * (0.5 + rng.random())


def rebalance_once(
    core,
    link,
    robot: RobotDeclaration,
    clock: Callable[[], float],
    rng: random.Random,
    stopping: Callable[[], bool] = lambda: False,
) -> str:
    """One look (``core``: the executor core's rebalancing verbs, ``link``: the server link); what
    happened, "" when nothing was done."""
    settings = core.settings
    current = core.rebalance_wanted(clock())
    if not current:
        return ""
    namespaces = tuple(link.namespaces)
    if not set(namespaces) - {current}:
        return ""  # no other replica known
    views = link.get_statuses(namespaces, settings.replica_status_timeout_s)
    move = decide(
        current,
        views,
        robot,
        core.identity.model,
        settings.rebalance_hysteresis,
        core.unanswered_replicas,
    )
    if (
        move is None
        or rng.random() >= move.chance
        or not core.begin_move(move.target, move.reason, clock())
    ):
        return ""
    problem = _session_on_target(core, link, move.target, dict(views).get(move.target), clock)
    if problem:
        core.end_move(clock(), problem)
        return f"rebalancing to {move.target} failed: {problem}"
    core.move_ready()  # the worker carries it out between two requests (``NetworkWorker.move``)
    # A request in flight ends within request_timeout_s; the worker's re-open is bounded as the
    # keeper's.
    deadline = (
        clock()
        + settings.request_timeout_s
        + settings.replica_status_timeout_s
        + 2.0
        + MOVE_WAIT_MARGIN_S
    )
    while (left := core.move_outcome()) is None and clock() < deadline and not stopping():
        time.sleep(MOVE_POLL_S)
    if not left:
        core.end_move(clock(), f"the move to {move.target} was not carried out")
        if not settings.keeps_standby and (opened := core.end_standby()) is not None:
            # opened for the move only: no standby is kept otherwise
            link.close_session_at(*opened)
        return f"rebalancing to {move.target} abandoned"
    core.end_move(clock())
    return f"{MOVED_TO} {move.target}: {move.reason}"


def _session_on_target(core, link, target: str, view: ServerView | str | None, clock) -> str:
    """Make sure the standby is on ``target`` (open one there, closing the one elsewhere); "" or
    the problem."""
    standby = core.standby
    if standby is not None and standby.replica == target and not standby.used:
        return ""
    previous = core.end_standby()
    if previous is not None:
        link.close_session_at(*previous)
    grant = link.open_standby(
        target,
        core.settings.replica_status_timeout_s + 2.0,
        check=lambda offered: core.check_model(offered.capabilities, clock()),
    )
    if not isinstance(grant, SessionGrant):
        return str(grant)
    instance_id = view.instance_id if isinstance(view, ServerView) else ""
    if not core.standby_opened(grant, instance_id, target, clock()):
        link.close_session_at(target, grant.session_id)
        return "the session moved meanwhile"
    return ""


class Rebalancer(threading.Thread):
    """Runs ``rebalance_once`` every ``rebalance_period_s`` at this robot's own random phase, until
    ``stop``."""

    def __init__(
        self,
        core,
        link,
        robot: RobotDeclaration,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = lambda text: None,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(name="lerobot_ros_rebalancer", daemon=True)
        self.core, self.link, self.robot, self.clock, self.log = core, link, robot, clock, log
        self.rng = rng or random.Random()
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(
            next_look_s(self.core.settings.rebalance_period_s, self.rng)
        ):
            try:
                outcome = rebalance_once(
                    self.core, self.link, self.robot, self.clock, self.rng, self._stop_event.is_set
                )
            except Exception as error:  # noqa: BLE001 - a failed look must not end the rebalancer
                outcome = f"rebalancing failed: {type(error).__name__}: {error}"
                self.core.end_move(self.clock(), outcome)
            if outcome and not outcome.startswith(MOVED_TO):
                self.log(outcome)
