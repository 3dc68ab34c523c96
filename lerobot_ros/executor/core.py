"""The executor's core: the parts that make one robot's behaviour, composed under one lock.

The parts, each owning its state and its rules:

* ``control/tick.py`` (``ControlTick``): the queue, playback, safety envelope and
  the command of every control tick;
* ``requests/request_cycle.py`` (``RequestCycle``): the one request in flight,
  its numbering, its answer, and the trigger that says when the next leaves;
* ``fleet/failover.py`` (``Failover``): the warm standby, hedged requests and
  rebalancing moves;
* ``session/session_state.py`` (``SessionState``): who the session is, which
  model, whether the server is still heard, who holds the robot;
* ``control/state_machine.py`` (``FailSafe``): what may be published, and when
  to reconnect;
* ``requests/observation_assembly.py``: the newest sensor data.

The core holds them and offers callers verbs only; each verb takes the one
lock and applies an event to every part it concerns in the same critical
section, so a control tick or a merge sees an event whole or not at all.
Invariants enforced here, between the parts:

* a merged chunk answers exactly the latest request of the current session,
  episode and epoch (a standby's winning answer first makes its session the
  current one);
* every way of losing the serving replica (heartbeat silence, a restart seen
  in a heartbeat, its departure from the graph, a standby's answer winning a
  hedged race, a drain, a lifecycle deactivate) enters ``_leave_serving_replica``
  with its reason, which keeps the distinction the request in flight needs: a
  drain's answer is still merged, a lost replica's request is given up at once
  (heartbeat silence spares a hedge racing to the standby), a standby's
  winning answer is merged after its session becomes the robot's;
* a move to another replica keeps the queue playing: the next request
  carries its RTC prefix, and the new session's epoch drops any chunk of the
  old replica.

Plain Python and thread-safe: the parts are not (but ``InFlight``, the queue
and the latency window have locks of their own, taken after the core's,
never before). Readers get frozen values (``identity``, ``snapshot``,
``transitions_since``). Times are the executor's monotonic clock: ``now_s``
in seconds, ``*_ns`` in nanoseconds.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lerobot_ros.executor.control.action_queue import QueueSnapshot
from lerobot_ros.executor.control.state_machine import FailSafe, Transition
from lerobot_ros.executor.control.tick import TICK_COUNTERS, ControlTick, envelope_for
from lerobot_ros.executor.fleet.failover import FAILOVER_COUNTERS, Failover, Promotion
from lerobot_ros.executor.fleet.hedging import Standby
from lerobot_ros.executor.fleet.replicas import PlannedMove
from lerobot_ros.executor.requests.answer_rules import Answer, Drops
from lerobot_ros.executor.requests.observation_assembly import NotSent, ObservationAssembler
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.requests.request_cycle import REQUEST_COUNTERS, RequestCycle
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.executor.session.session_state import Heard, SessionIdentity, SessionState
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.telemetry import ExecutorTelemetry, ServerHealth
from lerobot_ros.protocol.wire.data_plane import ReceivedChunk

#: The counters since start-up, named as in ExecutorTelemetry, each kept by the part it counts.
COUNTERS = TICK_COUNTERS + REQUEST_COUNTERS + FAILOVER_COUNTERS


class InFlightFate(enum.Enum):
    """What leaving the serving replica does to the request in flight."""

    #: a drain, or the session closed on purpose: the server answers what it owes
    STILL_MERGED = "still merged"
    #: the replica is gone (restarted, left the graph): its answer will never come
    GIVEN_UP = "given up"
    #: its heartbeat went silent: given up, unless a hedge races to the standby
    GIVEN_UP_UNLESS_HEDGED = "given up unless hedged"
    #: the standby answered a hedged race first: its session becomes the robot's
    ANSWERED_BY_STANDBY = "answered by the standby"


class Offline(NamedTuple):
    """Where the way back from OFFLINE stands."""

    holding: bool  # OFFLINE or DEAD: motion restarts only through ``recovery.resume``
    session_open: bool  # a session was opened again meanwhile (a resume needs no handshake)


@dataclass(frozen=True)
class CoreSnapshot:
    """One consistent read of the core: ``telemetry`` for ~/status and diagnostics, and the
    rest."""

    telemetry: ExecutorTelemetry
    identity: SessionIdentity
    last_problem: str  # the latest reason a request could not be sent
    drops: Drops
    next_action_age_s: float | None
    handshake_failures: int = 0  # failed (re-)handshakes since start-up
    last_handshake_error: str = ""
    standby_problem: str = ""  # why no standby is armed now ("" while one is, or none is wanted)


class ExecutorCore:
    """The parts of one robot's executor, and the verbs the node, the threads and the tests
    call."""

    def __init__(self, settings: ExecutorSettings, now_s: float) -> None:
        self.settings = settings  # frozen; replaced whole by change_settings
        self._lock = threading.Lock()
        self._failsafe = FailSafe(settings.failsafe, now_s)
        self._session = SessionState(
            settings.replicas, settings.failsafe.heartbeat_timeout_s, settings.task, now_s
        )
        self._sensors = ObservationAssembler(
            settings.joint_names,
            settings.camera_names,
            settings.state_include_velocity,
            settings.max_observation_age_s,
        )
        self._tick = ControlTick(settings)
        self._cycle = RequestCycle(settings)
        self._failover = Failover(settings, self._session, self._failsafe, self._cycle, now_s)
        # set by the control tick when the worker has something to do
        self._work = threading.Event()
        # One handshake at a time: the worker's re-handshakes and the operator's (activate,
        # ~/resume).
        self.handshaking = threading.Lock()

    def change_settings(self, settings: ExecutorSettings) -> None:
        """New settings while streaming (the runtime parameters: safety limits, fallback).

        Swapped with the envelope under the lock, so every control tick uses
        the old ones or the new ones whole, never a mix.
        """
        envelope = envelope_for(settings)
        with self._lock:
            self.settings = settings
            self._tick.change_settings(settings, envelope)
            self._cycle.change_settings(settings)
            self._failover.change_settings(settings)

    # ------------------------------------------------------------- sensors

    def on_joint_state(self, names, positions, velocities, now_s: float) -> None:
        self._sensors.on_joint_state(names, positions, velocities, now_s)

    def on_camera(self, name: str, msg, now_s: float) -> None:
        self._sensors.on_camera(name, msg, now_s)

    def pull_sensors(self, joint_state=None, cameras=None) -> None:
        """Sources read when a request or a hold needs them
        (``ObservationAssembler.pull_from``)."""
        self._sensors.pull_from(joint_state, cameras)

    # ------------------------------------------------------------ control tick

    def control_tick(self, now_s: float) -> np.ndarray | None:
        """This control tick's command in joint order, or None to publish nothing."""
        with self._lock:
            try:
                outcome = self._tick.tick(now_s, self._failsafe, self._sensors.measured_positions)
                if outcome.heartbeat_lost:
                    # Lost: move now, not at the request timeout.
                    self._leave_serving_replica(
                        now_s, self._failsafe.reason, InFlightFate.GIVEN_UP_UNLESS_HEDGED
                    )
                return outcome.command
            finally:
                if self._work_due(now_s):
                    self._work.set()

    # ------------------------------------------------- leaving the serving replica

    def _leave_serving_replica(self, now_s: float, reason: str, fate: InFlightFate) -> None:
        """The one way off the serving replica (under the lock), whatever lost it.

        The fail-safe reconnects (the worker then promotes a usable standby or
        places the robot again), except when a standby's answer already won:
        its session becomes the robot's at once. ``fate`` says what happens to
        the request in flight.
        """
        if fate is InFlightFate.ANSWERED_BY_STANDBY:
            self._open_promoted(self._failover.promotion(reason, now_s), now_s)
            return
        if fate is InFlightFate.GIVEN_UP or (
            fate is InFlightFate.GIVEN_UP_UNLESS_HEDGED and not self._cycle.hedge_racing
        ):
            self._cycle.give_up()
        # Heartbeat silence: the fail-safe is RECONNECTING already (a no-op here).
        self._failsafe.reconnect(now_s, reason)

    # ------------------------------------------------------- request cycle

    def reconnect_due(self, now_s: float) -> bool:
        """Whether the worker should (re-)place the robot now; called only with no request in
        flight (so a drain's last answer was merged)."""
        with self._lock:
            drain = self._session.fleet.take_drain()
            if drain:
                self._leave_serving_replica(now_s, drain, InFlightFate.STILL_MERGED)
            return self._failsafe.reconnect_due(now_s)

    def request_due(self, now_s: float) -> bool:
        with self._lock:
            return self._request_due()

    def _request_due(self) -> bool:
        if not self._failsafe.accepting_chunks or self._failsafe.paused:
            return False
        return self._cycle.due(self._tick.queued_time_s())

    def _work_due(self, now_s: float) -> bool:
        return self._request_due() or self._failsafe.reconnect_due(now_s)

    def _retarget(self) -> None:
        """The request threshold for the current session and standby (under the lock)."""
        identity = self._session.identity
        self._cycle.retarget(
            identity.chunk_size, identity.rtc_active, self._failover.allowance_s()
        )

    @property
    def request_threshold_s(self) -> float:
        """The queued playback time at which the next request is due (``trigger.py``), as of
        the latest merge."""
        with self._lock:
            return self._cycle.threshold_s

    def wait_for_work(self, timeout_s: float) -> None:
        """The idle network worker's wait: until the control tick says a request or reconnect
        is due, ``wake_worker`` is called, or ``timeout_s`` passes."""
        self._work.wait(timeout_s)
        self._work.clear()

    def wake_worker(self) -> None:
        self._work.set()

    def start_request(self, now_s: float, now_ns: int) -> PendingRequest | NotSent:
        """The next request, assembled from the newest sensor data, numbered and in flight from
        now on (so only its chunk may answer: call before publishing it); or why none can be
        sent."""
        observation = self._sensors.assemble(now_s, self.identity.policy_cameras)
        with self._lock:
            if isinstance(observation, NotSent):
                self._cycle.not_sent(observation)
                return observation
            identity = self._session.identity
            pending = self._numbered(
                observation, now_ns, identity.session_id, identity.epoch, identity.replica
            )
            self._session.observation_sent(now_s)
            self._cycle.start(pending, identity.model)
            return pending

    def _numbered(
        self, observation, now_ns: int, session_id: str, epoch: int, replica: str
    ) -> PendingRequest:
        identity = self._session.identity
        # Also taken in append mode (sent only with RTC): the merge measures
        # how the new chunk continues the rows executed meanwhile.
        queue = self._tick.snapshot(max_steps=identity.rtc_horizon or identity.chunk_size)
        return self._cycle.number(
            observation, now_ns, session_id, epoch, replica, identity, self._session.task, queue
        )

    def start_hedge(self, now_s: float, now_ns: int) -> PendingRequest | None:
        """The request in flight again, for the standby session: the newest sensor data, the
        queue as it is now and the delay for this moment, its own seq and the epoch a promotion
        will give it; None when no standby is usable or the request was answered meanwhile."""
        with self._lock:
            standby = self._failover.usable_standby(now_s)
            if standby is None:
                return None
        observation = self._sensors.assemble(now_s, self.identity.policy_cameras)
        if isinstance(observation, NotSent):
            return None
        with self._lock:
            if not self._failover.still_armed(standby):
                return None
            identity = self._session.identity
            # The epoch the session will have once promoted (``SessionState.opened``): its
            # chunk then matches.
            pending = self._numbered(
                observation, now_ns, standby.session_id, identity.epoch + 1, standby.replica
            )
            if not self._cycle.hedge(pending):
                return None
            self._failover.hedge_sent()
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
        """The rest of ``pending``'s cycle once the worker tried to publish it: its answer
        merged, or its refusal or timeout counted (not while ``stopping``). False when it was
        not sent (``send_problem``).

        ``hedge`` publishes a hedged request (``start_hedge``) when the answer is late past the
        hedge deadline and a standby is usable; the first valid answer of the two is merged.
        """
        if send_problem:
            with self._lock:
                self._cycle.not_published(send_problem)
            return False
        with self._lock:
            deadline_s = (
                self._failover.deadline_s()
                if hedge is not None and self._failover.standby is not None
                else None
            )
        answer, answering = None, pending
        timeout_s = self.settings.request_timeout_s
        if deadline_s is not None and clock_ns is not None:
            answer, answering, timeout_s = self._wait_then_hedge(
                pending, deadline_s, timeout_s, clock, clock_ns, stopping, hedge
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
                self._failover.race_lost(answering.request.session_id)
        return True

    def _wait_then_hedge(self, pending, deadline_s, timeout_s, clock, clock_ns, stopping, hedge):
        """Wait for the answer up to the hedge deadline, then hedge to the standby: (the answer
        or None, the request the rest of the wait is for, the time left to wait)."""
        waited_s = max(0.0, (clock_ns() - pending.request.sent_monotonic_ns) / 1e9)  # publishing
        answer = self._cycle.wait(max(0.0, deadline_s - waited_s), end=False)
        if answer is not None or stopping():
            return answer, pending, timeout_s
        hedged = self.start_hedge(clock(), clock_ns())
        problem = hedge(hedged) if hedged is not None else "no usable standby"
        if hedged is not None and not problem:
            return None, hedged, timeout_s  # a whole request timeout for the hedge
        if hedged is not None:
            with self._lock:
                self._cycle.note_problem(f"hedged request not sent: {problem}")
        elapsed_s = (clock_ns() - pending.request.sent_monotonic_ns) / 1e9
        return None, pending, max(0.0, timeout_s - elapsed_s)

    def cancel_request(self) -> None:
        """End the request in flight (shutdown): the waiter returns at once, a late chunk is
        dropped."""
        self._cycle.give_up()

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None:
        """From the chunk subscription: hand the chunk to the waiting worker, or drop it (the
        reason code)."""
        return self._cycle.offer_chunk(chunk, received_ns)

    def drop_chunk(self, code: str, explanation: str) -> None:
        """From the chunk subscription: a chunk message that did not even decode."""
        self._cycle.drop_chunk(code, explanation)

    def wait_for_answer(self, timeout_s: float) -> Answer:
        """The answer to the request in flight, or why there is none; ends the request."""
        return self._cycle.wait(timeout_s)

    def merge(
        self, pending: PendingRequest, chunk: ReceivedChunk, received_ns: int, now_s: float
    ) -> bool:
        """Merge the chunk answering ``pending``; False when it went stale meanwhile."""
        request = pending.request
        # the policy's units -> the robot's
        actions_robot = self.settings.mapping.to_robot(chunk.actions_robot)
        with self._lock:
            standby_won = self._failover.race_answered(request)
            if standby_won:
                self._leave_serving_replica(now_s, standby_won, InFlightFate.ANSWERED_BY_STANDBY)
            identity = self._session.identity
            current = (identity.session_id, identity.episode, identity.epoch)
            answers = (request.session_id, request.episode, request.epoch)
            if answers != current or not self._failsafe.accepting_chunks:
                self._cycle.drop_chunk(
                    "stale_episode", "a reset or reconnect happened while the chunk was on its way"
                )
                return False
            delay_steps = self._cycle.answered(request, received_ns)
            self._retarget()
            self._tick.merge(
                pending.snapshot,
                chunk.actions_model,
                actions_robot,
                delay_steps,
                # Age counts from when the oldest sensor sample was read, not
                # from the send: the policy planned from that moment's world.
                request.sent_monotonic_ns / 1e9 - pending.observation.oldest_age_s,
            )
            self._session.fleet.merged_in_session += 1
            self._failsafe.on_chunk_merged(now_s)
            return True

    def _request_failed(self, now_s: float, refusal: str = "") -> None:
        """A timeout, or the server answered with an error (REJECTED/FAILED): a failed request
        either way.

        A streak of them re-handshakes, which also recovers a session the
        server has closed meanwhile (e.g. after its idle timeout).
        """
        with self._lock:
            self._cycle.failed(refusal)
            self._failsafe.on_request_timeout(now_s, refusal=refusal)

    # ------------------------------------------------------------ the session

    def check_model(self, capabilities: ServerCapabilities, now_s: float) -> str | None:
        """On every re-handshake: the server must serve the model of the first one.

        Returns the reason when it does not (and goes DEAD when this executor
        knows one server only: a fleet skips that replica instead); None when
        it does or when this is the first handshake.
        """
        with self._lock:
            difference = self._session.model_difference(capabilities)
            if difference and not self.settings.is_fleet:
                self._failsafe.on_model_changed(now_s, difference)
            return difference

    def session_opened(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str = ""
    ) -> None:
        """A session is open (the first, or a re-opened one, maybe on another replica); the
        queue stays (same model), so playback goes on through a move."""
        with self._lock:
            self._open(
                grant, instance_id, now_s, replica or self._session.replica, self._failsafe.reason
            )

    def _open(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str, why_left: str
    ) -> None:
        """``session_opened`` under the lock; also a standby's promotion (``why_left``: why the
        old one went)."""
        fresh_queue = self._session.opened(grant, instance_id, now_s, replica, why_left)
        if fresh_queue:
            self._tick.fresh_queue(grant.rtc_enabled)
        self._failover.session_opened_on(replica)
        self._retarget()
        self._failsafe.on_handshake_ok(now_s)
        # settle first
        self._session.fleet.rebalance_after = now_s + self.settings.rebalance_cooldown_s

    def _open_promoted(self, promotion: Promotion, now_s: float) -> None:
        self._open(
            promotion.grant, promotion.instance_id, now_s, promotion.replica, promotion.why_left
        )

    def handshake_failed(self, reason: str, now_s: float) -> None:
        with self._lock:
            self._session.handshake_failures += 1
            self._failsafe.on_handshake_failed(now_s, reason)

    @property
    def unanswered_replicas(self) -> frozenset[str]:
        """Replicas whose latest session with this robot never answered with a chunk (placed
        last)."""
        with self._lock:
            return self._session.fleet.unanswered

    def replicas_found(self, replicas: tuple[str, ...]) -> None:
        """The replicas discovery knows now (for ~/status; the placement reads them from the
        link)."""
        with self._lock:
            self._session.fleet.replicas = replicas

    def replicas_skipped(self, skipped: tuple[str, ...]) -> None:
        """The latest placement's skipped replicas, each "namespace: why" (for ~/status)."""
        with self._lock:
            self._session.fleet.skipped = skipped

    def on_heartbeat(self, health: ServerHealth, now_s: float, replica: str = "") -> None:
        """A heartbeat (``health``) of ``replica`` (default: the only one): the standby's
        (``Failover.heard``), or the session's (``SessionState.heartbeat`` says what it
        means)."""
        with self._lock:
            if self._failover.heard(replica, health, now_s):
                self._retarget()
                return
            heard, reason = self._session.heartbeat(
                health, now_s, replica, self._failsafe.accepting_chunks
            )
            if heard is Heard.RESTARTED:
                self._leave_serving_replica(now_s, reason, InFlightFate.GIVEN_UP)
            elif heard is Heard.ALIVE:
                self._failsafe.on_heartbeat(now_s)

    def replica_left_graph(self, replica: str, now_s: float) -> None:
        """``replica``'s heartbeat publisher is gone from the ROS graph: lost now, not at the
        heartbeat timeout."""
        with self._lock:
            why = f"server {replica} left the ROS graph (its heartbeat publisher is gone)"
            if self._failover.left_graph(replica, why, now_s):
                self._retarget()
            elif replica == self._session.identity.replica and self._session.identity.session_id:
                # A drained server leaves the graph once it has delivered what it owed: its
                # drain is the reason.
                reason = self._session.fleet.take_drain() or why
                self._leave_serving_replica(now_s, reason, InFlightFate.GIVEN_UP)

    def pause(self, now_s: float, holder: str = "operator") -> None:
        """Hold position (the control tick publishes "hold", nothing is requested) until
        ``holder`` resumes."""
        with self._lock:
            self._session.hold(holder, now_s)
            self._failsafe.pause(now_s)

    def resume(self, now_s: float, holder: str = "operator") -> None:
        """``holder`` lets go; the executor streams again once no other holder is left."""
        with self._lock:
            reopen = self._session.let_go(holder, now_s)
            if reopen is None:
                return
            self._failsafe.resume(now_s)
            if reopen:
                self._leave_serving_replica(now_s, reopen, InFlightFate.STILL_MERGED)

    def holds(self, holder: str) -> bool:
        with self._lock:
            return self._session.holds(holder)

    def set_task(self, task: str) -> None:
        """The task the next observations carry (a goal's; the ``task`` parameter
        otherwise)."""
        with self._lock:
            self._session.task = task

    def clear_queue(self) -> None:
        """Drop the queued actions and the request in flight (a goal begins or ends: they were
        planned for another); the tick holds until the next chunk is merged."""
        with self._lock:
            self._clear_queue()

    def _clear_queue(self) -> None:
        self._tick.clear()
        self._cycle.give_up()

    def end_session(self) -> str:
        """The session is being closed (deactivation): its queue and request in flight are
        dropped, and a chunk still on its way is dropped too (new epoch); returns the session id
        to close. The standby goes too (``end_standby``)."""
        with self._lock:
            self._clear_queue()
            self._failsafe.session_closed()
            return self._session.ended()

    def resume_offline(self, now_s: float, by: str) -> str | None:
        """Restart motion from OFFLINE (``by``: who asked): None when done, else why not
        (``FailSafe``).

        The queue and the request in flight go (planned before the hold), so
        the first request after it carries a fresh observation and no RTC prefix.
        """
        with self._lock:
            problem = self._failsafe.resume_offline(now_s, by)
            if problem is None:
                self._clear_queue()
            return problem

    def revive(self, now_s: float, by: str) -> None:
        """DEAD: try again (lifecycle activate); ``FailSafe.revive``."""
        with self._lock:
            self._failsafe.revive(now_s, by)

    @property
    def offline(self) -> Offline:
        """Whether a resume must go through ``recovery.resume``, and with a session open or not."""
        with self._lock:
            state = self._failsafe.state
            holding = state in (ExecutorState.OFFLINE, ExecutorState.DEAD)
            return Offline(holding, self._failsafe.offline_session)

    def reopen(self, now_s: float, reason: str) -> None:
        """Open a new session now (activation after a deactivation): the worker
        re-handshakes."""
        with self._lock:
            self._leave_serving_replica(now_s, reason, InFlightFate.STILL_MERGED)

    def reset_episode(self) -> tuple[str, int]:
        """Clear the queue and bump the episode; returns (session id, new episode) for the
        server."""
        with self._lock:
            self._tick.episode_reset()
            session = self._session.next_episode()
            self._cycle.give_up()
            return session

    # ------------------------------------------------------------ the fleet

    def promote_standby(self, now_s: float) -> bool:
        """The serving replica is lost (the worker would re-handshake): move to a usable standby
        at once, with no placement; False when there is none (a placement it is)."""
        with self._lock:
            if self._failover.usable_standby(now_s) is None or not self._failsafe.reconnect_due(
                now_s
            ):
                return False
            # a request to the lost replica: its answer will not be merged
            self._cycle.give_up()
            why = self._failsafe.reason or "the serving replica was lost"
            self._open_promoted(self._failover.promotion(why, now_s), now_s)
            return True

    @property
    def standby(self) -> Standby | None:
        with self._lock:
            return self._failover.standby

    def standby_wanted(self, now_s: float) -> str | None:
        """``Failover.wanted``: the replica to re-arm a standby on, "" for a new one, or
        None."""
        with self._lock:
            return self._failover.wanted(now_s)

    def standby_opened(
        self, grant: SessionGrant, instance_id: str, replica: str, now_s: float
    ) -> bool:
        """A standby session was granted on ``replica`` (``Failover.opened``); False: the caller
        closes it."""
        with self._lock:
            opened = self._failover.opened(grant, instance_id, replica, now_s)
            self._retarget()
            return opened

    def standby_failed(self, reason: str, now_s: float) -> None:
        """No standby could be opened (``reason``); the next try waits
        ``failover.STANDBY_RETRY_S``."""
        with self._lock:
            self._failover.failed(reason, now_s)
            self._retarget()

    def end_standby(self) -> tuple[str, str] | None:
        """Drop the standby (the session is being closed): (its replica, its session id) to
        close, or None."""
        with self._lock:
            return self._failover.end()

    def rebalance_wanted(self, now_s: float) -> str:
        """``Failover.rebalance_wanted``: the serving replica when a look may move the robot."""
        with self._lock:
            return self._failover.rebalance_wanted(now_s)

    def begin_move(self, target: str, reason: str, now_s: float) -> bool:
        with self._lock:
            return self._failover.begin_move(target, reason, now_s)

    def move_ready(self) -> None:
        with self._lock:
            self._failover.move_ready()

    def due_move(self, now_s: float) -> PlannedMove | None:
        """The worker, between two requests: the move to carry out now
        (``NetworkWorker.move``), or None."""
        with self._lock:
            return self._failover.due_move(now_s)

    def move_opened(self, grant: SessionGrant, now_s: float) -> tuple[str, str] | None:
        """The standby on the move's target was re-opened as a serving session (``grant``): it
        is the session now (the queue plays on); the session left, (replica, session id), for
        the worker to close. None when the move is no longer under way (the caller closes
        ``grant``)."""
        with self._lock:
            promotion = self._failover.move_promotion(grant)
            if promotion is None:
                return None
            left = self._session.identity
            self._open_promoted(promotion, now_s)
            return self._failover.moved((left.replica, left.session_id), now_s)

    def move_abandoned(self, reason: str) -> None:
        with self._lock:
            self._failover.move_abandoned(reason)

    def move_outcome(self) -> tuple[str, ...] | None:
        with self._lock:
            return self._failover.move_outcome()

    def end_move(self, now_s: float, problem: str = "") -> None:
        with self._lock:
            self._failover.end_move(now_s, problem)

    # ------------------------------------------------------------ readers

    @property
    def identity(self) -> SessionIdentity:
        with self._lock:
            return self._session.identity

    @property
    def state(self) -> ExecutorState:
        with self._lock:
            return self._failsafe.state

    def transitions_since(self, count: int) -> tuple[tuple[Transition, ...], int]:
        """The fail-safe transitions after the first ``count`` ones (as far as the bounded log
        still holds them), and the total to pass next time."""
        with self._lock:
            total = self._failsafe.transition_count
            new = max(0, total - count)
            return (self._failsafe.transitions[-new:] if new else ()), total

    def queued_actions(self) -> QueueSnapshot:
        """Every unexecuted row, in model and robot space (the RTC parity test reads what the
        queue built)."""
        return self._tick.snapshot()

    def snapshot(self, now_s: float) -> CoreSnapshot:
        # Percentiles sort the window: read them under the tracker's own lock,
        # not the core's, which the control tick needs.
        latency = self._cycle.latency
        latency_p50, latency_p95, latency_max = latency.p50, latency.p95, latency.max
        with self._lock:
            session, failsafe, tick = self._session, self._failsafe, self._tick
            smoothness, standby = tick.smoothness, self._failover.standby
            identity = session.identity
            drops = self._cycle.drops()
            depth = tick.depth
            telemetry = ExecutorTelemetry(
                client_id=self.settings.client_id,
                session_id=identity.session_id,
                server_namespace=session.replica,
                state=int(failsafe.state),
                state_name=failsafe.state.name,
                reason=failsafe.reason,
                paused=failsafe.paused,
                episode=identity.episode,
                epoch=identity.epoch,
                rtc_active=identity.rtc_active,
                queue_depth=depth,
                queued_time_s=depth / self.settings.fps,
                latency_ms_p50=latency_p50 * 1000.0,
                latency_ms_p95=latency_p95 * 1000.0,
                latency_ms_max=latency_max * 1000.0,
                chunks_dropped=drops.total,
                fallback=self.settings.fallback,
                last_delay_steps=tick.last_merge.delay_steps,
                last_trimmed_rows=tick.last_merge.trimmed_rows,
                chunk_boundaries=smoothness.boundaries,
                boundary_jump_mean=smoothness.jump_mean,
                boundary_jump_max=smoothness.jump_max,
                action_step_mean=smoothness.step_mean,
                prefix_deviation_mean=smoothness.deviation_mean,
                prefix_deviation_max=smoothness.deviation_max,
                request_threshold_s=self._cycle.threshold_s,
                last_rejection_reason=self._cycle.last_rejection,
                other_server_instance=session.other_instance,
                task=session.task or self.settings.task,
                **self._counts(),
                replicas=session.fleet.replicas,
                replica_moves=session.fleet.moves,
                last_move_reason=session.fleet.last_move,
                replicas_skipped=session.fleet.skipped,
                last_drop_reason=drops.last,
                standby_replica=standby.replica if standby is not None else "",
                hedge_answers_dropped=drops.counts.get("hedge_lost", 0),
                hedge_deadline_ms=self._failover.deadline_ms() if standby is not None else 0.0,
            )
            return CoreSnapshot(
                telemetry,
                identity,
                self._cycle.last_problem,
                drops,
                tick.next_action_age_s(now_s),
                session.handshake_failures,
                failsafe.last_handshake_error,
                self._failover.problem,
            )

    def _counts(self) -> dict[str, int]:
        counts = {name: self._tick.count(name) for name in TICK_COUNTERS}
        counts.update({name: self._cycle.count(name) for name in REQUEST_COUNTERS})
        counts.update({name: self._failover.count(name) for name in FAILOVER_COUNTERS})
        return counts
