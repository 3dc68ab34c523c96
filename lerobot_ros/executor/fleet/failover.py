"""The robot's way off a replica without an empty tick: the warm standby, hedged requests and
rebalancing moves (``hedging.py`` and ``rebalancing.py``: the rules).

Owns the standby (``hedging.Standby``), when to try arming one again and why
none is armed, and the hedge counters; a rebalancing move's record lives in
the session's ``FleetRecord``. Invariants enforced here:

* at most one standby, never on the serving replica; a standby a lost hedge
  turned into an ordinary session (the server saw an observation on it) is
  re-armed, one that restarted, drains or left the graph is dropped;
* a request is hedged only while a standby is usable, and only once, after the
  hedge deadline (``hedge_deadline_s``: from the windowed round trip);
* a standby becomes the session only through a ``Promotion`` the executor
  core applies (``ExecutorCore._open``): after its answer won a race, after the
  serving replica was lost, or as a rebalancing move's step;
* a move is carried out between two requests, only while the robot streams
  with a usable standby on the target; it ends carried out or abandoned,
  never half.

Not thread-safe: the executor core calls it under its one lock. It reads the
session (``SessionState``), the fail-safe and the round trip of the request
cycle, parts the core composes, through their public interfaces.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from lerobot_ros.executor.control.state_machine import FailSafe
from lerobot_ros.executor.fleet.hedging import Standby, hedge_allowance_s, hedge_deadline_s
from lerobot_ros.executor.fleet.replicas import PlannedMove
from lerobot_ros.executor.requests.request_cycle import RequestCycle
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.executor.session.session_state import SessionState
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.telemetry import ServerHealth
from lerobot_ros.protocol.wire.data_plane import RequestId

#: After a standby could not be opened (no other ready replica of the model), the next try
#: waits this long.
STANDBY_RETRY_S = 2.0

#: The failover's counters since start-up, named as in ExecutorTelemetry.
FAILOVER_COUNTERS = ("hedges_sent", "hedges_won", "standby_promotions")


@dataclass(frozen=True)
class Promotion:
    """A standby session to make the robot's session: ``ExecutorCore._open``'s arguments."""

    grant: SessionGrant
    instance_id: str
    replica: str
    why_left: str  # why the serving replica's session was left


class Failover:
    """The standby, the hedge deadline and rebalancing moves of one robot."""

    def __init__(
        self,
        settings: ExecutorSettings,
        session: SessionState,
        failsafe: FailSafe,
        cycle: RequestCycle,
        now_s: float,
    ) -> None:
        self._settings = settings
        self._session, self._failsafe, self._cycle = session, failsafe, cycle
        self._standby: Standby | None = None
        self._retry_at = now_s
        self._problem = ""  # why no standby is armed now ("" while one is, or none is wanted)
        self._counts: Counter[str] = Counter()

    def change_settings(self, settings: ExecutorSettings) -> None:
        self._settings = settings

    # ------------------------------------------------------------------ hedging

    def deadline_s(self) -> float | None:
        """When a late request is hedged (``hedging.hedge_deadline_s``), or None: not yet."""
        settings, latency = self._settings, self._cycle.latency
        return hedge_deadline_s(
            latency.p95,
            latency.count,
            settings.hedge_deadline_factor,
            settings.hedge_min_deadline_s,
            settings.request_timeout_s,
        )

    def deadline_ms(self) -> float:
        deadline = self.deadline_s()
        return 0.0 if deadline is None else deadline * 1000.0

    def allowance_s(self) -> float:
        """The queued time the trigger adds so a hedge still lands in time (0: no standby)."""
        if self._standby is None:
            return 0.0
        return hedge_allowance_s(self.deadline_s(), self._cycle.latency.p95)

    def usable_standby(self, now_s: float) -> Standby | None:
        standby = self._standby
        if standby is None or not standby.usable(
            now_s, self._settings.failsafe.heartbeat_timeout_s
        ):
            return None
        return standby

    def still_armed(self, standby: Standby) -> bool:
        """Whether ``standby`` (read before the lock was let go) is still the one, unused."""
        return standby is self._standby and not standby.used

    def hedge_sent(self) -> None:
        self._counts["hedges_sent"] += 1

    def race_answered(self, request: RequestId) -> str | None:
        """A merge's first step: why the serving replica is left when a chunk of the standby's
        session won a hedged race (the core then promotes the standby), or None."""
        standby = self._standby
        # RECONNECTING too: a hedge in flight when the serving replica's heartbeat timed
        # out is the way out.
        if (
            standby is None
            or request.session_id != standby.session_id
            or not (
                self._failsafe.accepting_chunks
                or self._failsafe.state is ExecutorState.RECONNECTING
            )
        ):
            return None
        self._counts["hedges_won"] += 1
        return (
            f"hedged request answered first by the standby ({self._session.identity.replica} "
            f"did not answer within {self.deadline_ms():.0f} ms)"
        )

    def race_lost(self, session_id: str) -> None:
        """A hedge to the standby (``session_id``) was not promoted, but the server saw an
        observation on it and made it an ordinary session: open it again as a standby."""
        standby = self._standby
        if standby is not None and standby.session_id == session_id:
            standby.used = True
            self._problem = "re-arming the standby after a hedged request"

    # ------------------------------------------------------------------ the standby

    def promotion(self, why_left: str, now_s: float) -> Promotion:
        """The standby taken to become the session; a new one is wanted at once."""
        standby, self._standby = self._standby, None
        self._counts["standby_promotions"] += 1
        self._problem = f"promoted the standby on {standby.replica}: opening a new one"
        self._retry_at = now_s
        return Promotion(standby.grant, standby.instance_id, standby.replica, why_left)

    def session_opened_on(self, replica: str) -> None:
        """The robot's session is now on ``replica``: a standby there was replaced by it (one
        session per client id on a server)."""
        if self._standby is not None and self._standby.replica == replica:
            self._standby = None

    def heard(self, replica: str, health: ServerHealth, now_s: float) -> bool:
        """A heartbeat: True when it was the standby replica's (and handled here)."""
        standby = self._standby
        if standby is None or replica != standby.replica:
            return False
        lost = standby.heard(health.instance_id, now_s, health.draining)
        if lost:
            self._standby_lost(lost, now_s)
        return True

    def left_graph(self, replica: str, why: str, now_s: float) -> bool:
        """``replica`` left the ROS graph: True when it was the standby's (dropped)."""
        if self._standby is None or self._standby.replica != replica:
            return False
        self._standby_lost(why, now_s)
        return True

    def _standby_lost(self, reason: str, now_s: float) -> None:
        self._standby = None
        self._problem = reason
        self._retry_at = now_s

    def wanted(self, now_s: float) -> str | None:
        """The replica whose session to re-arm as a standby (after a hedge it lost), "" to place
        a new one, or None when none is wanted now (none is kept, one is armed, no session, or
        waiting to retry)."""
        # A rebalancing move places the standby itself.
        if (
            not self._settings.keeps_standby
            or not self._session.identity.session_id
            or not self._failsafe.accepting_chunks
            or now_s < self._retry_at
            or self._session.fleet.move is not None
        ):
            return None
        standby = self._standby
        if standby is None:
            return ""
        return standby.replica if standby.used else None

    def opened(self, grant: SessionGrant, instance_id: str, replica: str, now_s: float) -> bool:
        """A standby session was granted on ``replica`` (``instance_id`` "" when re-armed: the
        one it had); False when it is no longer wanted there (the session moved onto that
        replica meanwhile): the caller closes it."""
        identity = self._session.identity
        if replica == identity.replica or not identity.session_id:
            return False
        previous = self._standby
        if not instance_id and previous is not None and previous.replica == replica:
            instance_id = previous.instance_id
        self._standby = Standby(replica, grant, instance_id, heard_at=now_s)
        self._problem = ""
        return True

    def failed(self, reason: str, now_s: float) -> None:
        """No standby could be opened (``reason``); the next try waits ``STANDBY_RETRY_S``."""
        if self._standby is not None and self._standby.used:
            self._standby = None
        self._problem = reason
        self._retry_at = now_s + STANDBY_RETRY_S

    def end(self) -> tuple[str, str] | None:
        """Drop the standby (the session is being closed): (its replica, its session id) to
        close, or None."""
        standby, self._standby = self._standby, None
        return None if standby is None else (standby.replica, standby.session_id)

    @property
    def standby(self) -> Standby | None:
        return self._standby

    # ------------------------------------------------------------------ rebalancing

    def rebalance_wanted(self, now_s: float) -> str:
        """The serving replica when a rebalancing look may move the robot now: streaming, not
        paused, no move under way, past the cooldown of the latest session opening; else ""."""
        fleet, identity, failsafe = self._session.fleet, self._session.identity, self._failsafe
        if (
            not identity.session_id
            or failsafe.state is not ExecutorState.STREAMING
            or failsafe.paused
            or fleet.move is not None
            or now_s < fleet.rebalance_after
        ):
            return ""
        return identity.replica

    def begin_move(self, target: str, reason: str, now_s: float) -> bool:
        """Plan a move to ``target``; False when one is under way or the robot is there."""
        fleet = self._session.fleet
        if (
            fleet.move is not None
            or target == self._session.identity.replica
            or now_s < fleet.rebalance_after
        ):
            return False
        fleet.move = PlannedMove(target, reason)
        return True

    def move_ready(self) -> None:
        """The standby is on the move's target: the worker may carry the move out."""
        if self._session.fleet.move is not None:
            self._session.fleet.move.due = True

    def due_move(self, now_s: float) -> PlannedMove | None:
        """The move to carry out now, or None. A due move whose standby on the target is gone,
        or a robot no longer streaming, abandons it."""
        move = self._session.fleet.move
        if move is None or not move.due or move.left is not None:
            return None
        standby = self.usable_standby(now_s)
        if (
            standby is None
            or standby.replica != move.target
            or self._failsafe.state is not ExecutorState.STREAMING
        ):
            move.left = ()
            self._cycle.note_problem(
                f"rebalancing move to {move.target} abandoned: its session there is gone, "
                f"or the robot is not streaming"
            )
            return None
        return move

    def move_promotion(self, grant: SessionGrant) -> Promotion | None:
        """The standby on the move's target, re-opened as a serving session (``grant``), to
        become the session; None when the move is no longer under way."""
        move, standby = self._session.fleet.move, self._standby
        if (
            move is None
            or move.left is not None
            or standby is None
            or standby.replica != move.target
        ):
            return None
        return Promotion(grant, standby.instance_id, move.target, move.reason)

    def moved(self, left: tuple[str, str], now_s: float) -> tuple[str, str]:
        """The move was carried out: ``left`` (replica, session id) is for the worker to close."""
        move = self._session.fleet.move
        move.left = left
        self._problem = f"moved to {move.target}: opening a new standby"
        self._retry_at = now_s
        return left

    def move_abandoned(self, reason: str) -> None:
        move = self._session.fleet.move
        if move is not None and move.left is None:
            move.left = ()
            self._cycle.note_problem(f"rebalancing move to {move.target} abandoned: {reason}")

    def move_outcome(self) -> tuple[str, ...] | None:
        """None while the move waits for the worker; the old session's (replica, session id)
        once carried out; () when it was abandoned (or no move is under way)."""
        move = self._session.fleet.move
        return () if move is None else move.left

    def end_move(self, now_s: float, problem: str = "") -> None:
        """The move is over, carried out or failed (``problem``, kept for ~/status); either way
        no other before the cooldown."""
        fleet = self._session.fleet
        fleet.move = None
        fleet.rebalance_after = now_s + self._settings.rebalance_cooldown_s
        if problem:
            self._cycle.note_problem(f"rebalancing: {problem}")

    # ------------------------------------------------------------------ readers

    @property
    def problem(self) -> str:
        return self._problem

    def count(self, name: str) -> int:
        return self._counts[name]
