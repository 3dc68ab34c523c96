"""The executor core's zero-gap failover: the hedged request cycle and the warm standby
(``hedging.py``: the rules).

Invariants: a request is hedged only while a standby is usable and only once,
after the hedge deadline; the first valid answer is merged, and the
standby's promotes it into the session (``SessionVerbs._open``) before the
merge checks the ids; a lost serving replica promotes a usable standby
without a placement; a standby a lost race turned into an ordinary session
is re-armed; every change of the standby recomputes the request threshold.

Mixed into ``core.ExecutorCore`` like ``SessionVerbs``: each verb takes the
core's one lock; nothing else uses this class.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

from lerobot_ros.executor.control.state_machine import FailSafe
from lerobot_ros.executor.fleet.hedging import Standby, hedge_deadline_s
from lerobot_ros.executor.fleet.replicas import PlannedMove
from lerobot_ros.executor.requests.answer_rules import Answer, InFlight
from lerobot_ros.executor.requests.latency import WindowedLatencyTracker
from lerobot_ros.executor.requests.observation_assembly import NotSent, ObservationAssembler
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.executor.session.session_state import SessionState
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.wire.data_plane import RequestId

#: After a standby could not be opened (no other ready replica of the model), the next try waits
# this long.
STANDBY_RETRY_S = 2.0


class FailoverVerbs:
    """The failover side of the executor core (all under ``_lock``)."""

    settings: ExecutorSettings
    _lock: threading.Lock
    _failsafe: FailSafe
    _session: SessionState
    _in_flight: InFlight
    _latency: WindowedLatencyTracker
    _sensors: ObservationAssembler
    _counts: Counter
    _seq: int
    _last_problem: str
    _standby: Standby | None
    _standby_retry_at: float
    _standby_problem: str

    def _open(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str, why_left: str
    ) -> None:
        raise NotImplementedError  # SessionVerbs'

    def _numbered(
        self, observation, now_ns: int, session_id: str, epoch: int, replica: str
    ) -> PendingRequest:
        raise NotImplementedError  # the core's

    def wait_for_answer(self, timeout_s: float) -> Answer:
        raise NotImplementedError  # the core's

    def merge(self, pending: PendingRequest, chunk, received_ns: int, now_s: float) -> bool:
        raise NotImplementedError  # the core's

    def _request_failed(self, now_s: float, refusal: str = "") -> None:
        raise NotImplementedError  # the core's

    @property
    def identity(self):
        raise NotImplementedError  # the core's

    def _promote_if_standby_answered(self, request: RequestId, now_s: float) -> None:
        """A merge's first step (under the lock): a chunk of the standby's session won a hedged
        race."""
        standby = self._standby
        # RECONNECTING too: a hedge in flight when the serving replica's heartbeat timed out is the
        # way out.
        if (
            standby is not None
            and request.session_id == standby.session_id
            and (
                self._failsafe.accepting_chunks
                or self._failsafe.state is ExecutorState.RECONNECTING
            )
        ):
            left = self._session.identity.replica
            self._promote(
                now_s,
                f"hedged request answered first by the standby ({left} did not answer "
                f"within {self._hedge_deadline_ms():.0f} ms)",
            )
            self._counts["hedges_won"] += 1

    def _hedge_deadline_s(self) -> float | None:
        settings = self.settings
        return hedge_deadline_s(
            self._latency.p95,
            self._latency.count,
            settings.hedge_deadline_factor,
            settings.hedge_min_deadline_s,
            settings.request_timeout_s,
        )

    def _recompute_threshold(self) -> None:
        identity = self._session.identity
        self._threshold_s = self._threshold(identity.chunk_size, identity.rtc_active)

    def start_hedge(self, now_s: float, now_ns: int) -> PendingRequest | None:
        """The request in flight again, for the standby session: the newest sensor data, the queue
        as it is
        now and the delay for this moment, its own seq and the epoch a promotion will give it; None
        when no
        standby is usable or the request was answered meanwhile (then nothing is hedged)."""
        with self._lock:
            standby = self._standby
            if standby is None or not standby.usable(
                now_s, self.settings.failsafe.heartbeat_timeout_s
            ):
                return None
        observation = self._sensors.assemble(now_s, self.identity.policy_cameras)
        if isinstance(observation, NotSent):
            return None
        with self._lock:
            if standby is not self._standby or standby.used:
                return None
            identity = self._session.identity
            # The epoch the session will have once promoted (``SessionState.opened``): its chunk
            # then matches.
            pending = self._numbered(
                observation, now_ns, standby.session_id, identity.epoch + 1, standby.replica
            )
            if not self._in_flight.hedge(pending.request):
                self._seq -= 1
                self._counts["requests_sent"] -= 1
                return None
            self._counts["hedges_sent"] += 1
            return pending

    def complete_request(
        self,
        pending: PendingRequest,
        send_problem: str | None,
        clock: Callable[[], float],
        stopping: Callable[[], bool] = lambda: False,
        hedge: Callable[[PendingRequest], str | None] | None = None,
        clock_ns: Callable[[], int] | None = None,
    ) -> bool:
        """The rest of ``pending``'s cycle once the worker tried to publish it: its answer merged,
        or its
        refusal or timeout counted (not while ``stopping``). False when it was not sent
        (``send_problem``).

        ``hedge`` publishes a hedged request (``start_hedge``) when the answer is late past the
        hedge
        deadline and a standby is usable; the first valid answer of the two is merged.
        """
        if send_problem:
            with self._lock:
                self._in_flight.cancel()
                self._last_problem = send_problem
            return False
        with self._lock:
            deadline_s = (
                self._hedge_deadline_s()
                if hedge is not None and self._standby is not None
                else None
            )
        answer, answering = None, pending
        timeout_s = self.settings.request_timeout_s
        if deadline_s is not None and clock_ns is not None:
            # publishing took this
            waited_s = max(0.0, (clock_ns() - pending.request.sent_monotonic_ns) / 1e9)
            answer = self._in_flight.wait(max(0.0, deadline_s - waited_s), end=False)
            if answer is None and not stopping():
                hedged = self.start_hedge(clock(), clock_ns())
                problem = hedge(hedged) if hedged is not None else "no usable standby"
                if hedged is not None and not problem:
                    answering = hedged  # a whole request timeout for the hedge
                else:
                    if hedged is not None:
                        with self._lock:
                            self._last_problem = f"hedged request not sent: {problem}"
                    timeout_s = max(
                        0.0, timeout_s - (clock_ns() - pending.request.sent_monotonic_ns) / 1e9
                    )
        if answer is None:
            answer = self.wait_for_answer(timeout_s)
        if answer.chunk is not None:
            hedge_won = answering is not pending and answer.request == answering.request
            self.merge(
                answering if hedge_won else pending, answer.chunk, answer.received_ns, clock()
            )
        elif answer.refusal and not stopping():
            self._request_failed(clock(), refusal=answer.refusal)
        elif answer.timed_out and not stopping():
            self._request_failed(clock())
        if answering is not pending:
            with self._lock:
                standby = self._standby
                if standby is not None and standby.session_id == answering.request.session_id:
                    # The standby was not promoted (its answer lost, or none came), but it saw an
                    # observation:
                    # the server made it an ordinary session. Open it again as a standby.
                    standby.used = True
                    self._standby_problem = "re-arming the standby after a hedged request"
        return True

    def _hedge_deadline_ms(self) -> float:
        deadline = self._hedge_deadline_s()
        return 0.0 if deadline is None else deadline * 1000.0

    def _promote(self, now_s: float, why: str) -> None:
        """The standby becomes the session (under the lock): the queue plays on, a new standby is
        wanted."""
        standby, self._standby = self._standby, None
        self._open(standby.grant, standby.instance_id, now_s, standby.replica, why)
        self._counts["standby_promotions"] += 1
        self._standby_problem = f"promoted the standby on {standby.replica}: opening a new one"
        self._standby_retry_at = now_s

    def promote_standby(self, now_s: float) -> bool:
        """The serving replica is lost (the worker would re-handshake): move to a usable standby at
        once,
        with no placement; False when there is none (a placement it is)."""
        with self._lock:
            standby = self._standby
            if (
                standby is None
                or not standby.usable(now_s, self.settings.failsafe.heartbeat_timeout_s)
                or not self._failsafe.reconnect_due(now_s)
            ):
                return False
            # a request to the lost replica: its answer will not be merged
            self._in_flight.cancel()
            self._promote(now_s, self._failsafe.reason or "the serving replica was lost")
            return True

    def standby_wanted(self, now_s: float) -> str | None:
        """The replica whose session to re-arm as a standby (after a hedge it lost), "" to place a
        new one, or
        None when no standby is wanted now (none is kept, one is armed, no session, or waiting to
        retry)."""
        with self._lock:
            # a rebalancing move places the standby itself
            if (
                not self.settings.keeps_standby
                or not self._session.identity.session_id
                or not self._failsafe.accepting_chunks
                or now_s < self._standby_retry_at
                or self._session.fleet.move is not None
            ):
                return None
            standby = self._standby
            if standby is None:
                return ""
            return standby.replica if standby.used else None

    def standby_opened(
        self, grant: SessionGrant, instance_id: str, replica: str, now_s: float
    ) -> bool:
        """A standby session was granted on ``replica`` (``instance_id`` "" when re-armed: the one
        it had); False
        when it is no longer wanted there (the session moved onto that replica meanwhile): the
        caller closes it."""
        with self._lock:
            if replica == self._session.identity.replica or not self._session.identity.session_id:
                return False
            previous = self._standby
            if not instance_id and previous is not None and previous.replica == replica:
                instance_id = previous.instance_id
            self._standby = Standby(replica, grant, instance_id, heard_at=now_s)
            self._standby_problem = ""
            self._recompute_threshold()
            return True

    def standby_failed(self, reason: str, now_s: float) -> None:
        """No standby could be opened (``reason``); the next try waits ``STANDBY_RETRY_S``."""
        with self._lock:
            if self._standby is not None and self._standby.used:
                self._standby = None
                self._recompute_threshold()
            self._standby_problem = reason
            self._standby_retry_at = now_s + STANDBY_RETRY_S

    def _standby_lost(self, reason: str, now_s: float) -> None:
        self._standby = None
        self._standby_problem = reason
        self._standby_retry_at = now_s
        self._recompute_threshold()

    def replica_left_graph(self, replica: str, now_s: float) -> None:
        """``replica``'s heartbeat publisher is gone from the ROS graph: lost now, not at the
        heartbeat timeout."""
        with self._lock:
            why = f"server {replica} left the ROS graph (its heartbeat publisher is gone)"
            if self._standby is not None and self._standby.replica == replica:
                self._standby_lost(why, now_s)
            elif replica == self._session.identity.replica and self._session.identity.session_id:
                # A drained server leaves the graph once it has delivered what it owed: its drain
                # is the reason.
                self._failsafe.on_server_restarted(now_s, self._session.fleet.take_drain() or why)
                self._in_flight.cancel()  # its answer will never come

    @property
    def standby(self) -> Standby | None:
        with self._lock:
            return self._standby

    # ---------------------------------------------------------- rebalancing (rebalancing.py: the
    # rules)

    def rebalance_wanted(self, now_s: float) -> str:
        """The serving replica when a rebalancing look may move the robot now: streaming, not
        paused, no move
        under way, past the cooldown of the latest session opening; else ""."""
        with self._lock:
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
        """Plan a move to ``target``; False when one is under way or the robot is there already."""
        with self._lock:
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
        """The standby is on the move's target: the worker may carry the move out between two
        requests."""
        with self._lock:
            if self._session.fleet.move is not None:
                self._session.fleet.move.due = True

    def due_move(self, now_s: float) -> PlannedMove | None:
        """The worker, between two requests: the move to carry out now (``NetworkWorker.move``), or
        None. A
        due move whose standby on the target is gone, or a robot no longer streaming, abandons
        it."""
        with self._lock:
            move = self._session.fleet.move
            if move is None or not move.due or move.left is not None:
                return None
            standby = self._standby
            if (
                standby is None
                or standby.replica != move.target
                or not standby.usable(now_s, self.settings.failsafe.heartbeat_timeout_s)
                or self._failsafe.state is not ExecutorState.STREAMING
            ):
                move.left = ()
                self._last_problem = (
                    f"rebalancing move to {move.target} abandoned: its session there is gone, "
                    f"or the robot is not streaming"
                )
                return None
            return move

    def move_opened(self, grant: SessionGrant, now_s: float) -> tuple[str, str] | None:
        """The standby on the move's target was re-opened as a serving session (``grant``): it is
        the session
        now (the queue plays on); the session left, (replica, session id), for the worker to close.
        None
        when the move is no longer under way (the caller closes ``grant``)."""
        with self._lock:
            move, standby = self._session.fleet.move, self._standby
            if (
                move is None
                or move.left is not None
                or standby is None
                or standby.replica != move.target
            ):
                return None
            left = self._session.identity
            self._open(grant, standby.instance_id, now_s, move.target, move.reason)
            move.left = (left.replica, left.session_id)
            self._standby_problem = f"moved to {move.target}: opening a new standby"
            self._standby_retry_at = now_s
            return move.left

    def move_abandoned(self, reason: str) -> None:
        with self._lock:
            move = self._session.fleet.move
            if move is not None and move.left is None:
                move.left = ()
                self._last_problem = f"rebalancing move to {move.target} abandoned: {reason}"

    def move_outcome(self) -> tuple[str, ...] | None:
        """None while the move waits for the worker; the old session's (replica, session id) once
        carried out;
        () when it was abandoned (or no move is under way)."""
        with self._lock:
            move = self._session.fleet.move
            return () if move is None else move.left

    def end_move(self, now_s: float, problem: str = "") -> None:
        """The move is over, carried out (its old session closed: a new standby is wanted) or
        failed
        (``problem``, kept for ~/status); either way no other before the cooldown."""
        with self._lock:
            fleet = self._session.fleet
            fleet.move = None
            fleet.rebalance_after = now_s + self.settings.rebalance_cooldown_s
            if problem:
                self._last_problem = f"rebalancing: {problem}"
