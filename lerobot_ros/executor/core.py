"""The executor's state, shared by the control loop, the chunk subscription and the network worker.

Composes the finished plain parts — ``ActionQueue``, ``WindowedLatencyTracker``,
``SafetyEnvelope``, ``FailSafe``, ``InFlight`` — with the observation holders,
and offers callers verbs only: nothing outside reads or writes its parts.
Invariants enforced here:

* the control tick never blocks and never touches the network: it asks the
  fail-safe what to do, pops at most one action, passes whatever it will
  publish through the safety envelope, and returns it; at a control rate
  above ``fps`` it commands the point between the playing action and the
  next one (``interpolation.Playback``), and the fail-safe judges that
  segment's older end, every tick;
* the next request is due only when the queued playback time is at most the
  request threshold (``trigger.request_threshold_s``: ``buffer_time_s`` or
  more when the round trip needs it), with a session open and not paused;
  the control tick wakes the network worker when it is (or a reconnect is)
  due, so the idle worker waits on an event, not a poll;
* a merged chunk answers exactly the latest request of the current session,
  episode and epoch; its rows carry their observation's send time so the
  staleness bound holds per row;
* the model validated by the FIRST handshake is the only one ever executed;
* a move to another replica (``replicas.py``) keeps the queue playing: the
  next request carries its RTC prefix, and the new session's epoch drops any
  chunk of the old replica; a drain the current replica announces moves the
  robot once the request in flight is answered (its chunk is still merged),
  a lost replica cancels the request in flight at once;
* the session identity (``SessionIdentity``) is one frozen value, replaced as
  a whole under the lock (a session opens or re-opens, an episode resets), so
  every reader sees one consistent session, episode and epoch;
* a hold (``pause``) is kept by name: the operator's pause, the lifecycle's
  deactivation and "no goal" (``wait_for_goal``) each hold independently, and
  the executor streams again only when none holds;
* the task each observation carries is the core's (``set_task``), read with
  the request it goes out with.

Plain Python and thread-safe: one lock guards the fail-safe (not thread-safe
itself), the identity, the counters and the smoothness figures; the queue,
latency tracker, in-flight request and sensor holders have their own locks and
are taken after the core's, never before. Readers get frozen values
(``identity``, ``snapshot``, ``transitions_since``). Times are the executor's
monotonic clock: ``now_s`` in seconds, ``*_ns`` in nanoseconds.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from lerobot_ros.contract import ServerCapabilities
from lerobot_ros.wire.data_plane import ReceivedChunk, RequestId
from lerobot_ros.executor.action_queue import ActionQueue, QueueSnapshot
from lerobot_ros.executor.chunks import Answer, Drops, InFlight, ValidatedModel
from lerobot_ros.executor.handshake import SessionGrant
from lerobot_ros.executor.interpolation import Playback, Row, step_per_tick
from lerobot_ros.executor.replicas import FleetRecord
from lerobot_ros.executor.latency import WindowedLatencyTracker, control_steps
from lerobot_ros.executor.observation import AssembledObservation, NotSent, ObservationAssembler
from lerobot_ros.executor.safety import SafetyEnvelope
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.executor.smoothness import SmoothnessTracker
from lerobot_ros.executor.state_machine import ExecutorState, FailSafe, TickAction, Transition, fallback_action
from lerobot_ros.executor.trigger import request_threshold_s
from lerobot_ros.telemetry import ExecutorTelemetry


#: A resume re-opens the session when the server has not heard from it for
#: this share of the idle timeout it granted the session with: the server may
#: have closed it, and a fresh one costs one call, not two unanswered requests.
REOPEN_AT_IDLE_SHARE = 0.5

#: The counters since start-up, named as in ExecutorTelemetry.
COUNTERS = ("commands_published", "requests_sent", "chunks_merged", "request_timeouts", "starvation_ticks",
            "fallback_ticks", "observations_too_old", "safety_interventions", "request_rejections")


def request_due(queued_time_s: float, buffer_time_s: float) -> bool:
    """The trigger rule: ask for the next chunk when the queue covers at most the buffer time."""
    return queued_time_s <= buffer_time_s


@dataclass(frozen=True)
class SessionIdentity:
    """Which server, session, episode and epoch the executor is in, and what a chunk must match.

    ``model`` is the one of the FIRST handshake and never changes afterwards;
    ``epoch`` counts re-opened sessions; ``episode`` counts resets.
    """

    model: ValidatedModel | None = None
    instance_id: str = ""
    session_id: str = ""
    rtc_active: bool = False
    rtc_horizon: int = 0
    chunk_size: int = 0
    policy_cameras: frozenset[str] | None = None  # None until a session is open
    epoch: int = 0
    episode: int = 0
    replica: str = ""  # the server namespace the session is open on
    idle_timeout_s: float = math.inf  # the server closes the session after this long without an observation


@dataclass(frozen=True)
class PreparedRequest:
    """One request about to be sent, and what its merge needs later."""

    request: RequestId
    observation: AssembledObservation
    snapshot: QueueSnapshot
    inference_delay_steps: int  # 0 unless RTC is on
    rtc: bool
    task: str = ""  # sent with the observation; empty: the session's task


@dataclass(frozen=True)
class CoreSnapshot:
    """One consistent read of the core: ``telemetry`` for ~/status and diagnostics, and the rest."""

    telemetry: ExecutorTelemetry
    identity: SessionIdentity
    last_problem: str  # the latest reason a request could not be sent
    drops: Drops
    next_action_age_s: float | None
    handshake_failures: int = 0  # failed (re-)handshakes since start-up
    last_handshake_error: str = ""


def _envelope(settings: ExecutorSettings) -> SafetyEnvelope:
    """The safety envelope the settings ask for, its step limit per control tick."""
    return SafetyEnvelope.from_parameters(
        settings.joint_names,
        settings.joint_lower_limits,
        settings.joint_upper_limits,
        step_per_tick(settings.max_step_per_tick, settings.fps, settings.command_rate_hz),
        reject_non_finite=settings.reject_non_finite,
    )


class ExecutorCore:
    def __init__(self, settings: ExecutorSettings, now_s: float) -> None:
        self.settings = settings  # frozen; replaced whole by change_settings
        self._dim = len(settings.joint_names)
        self._lock = threading.Lock()
        self._failsafe = FailSafe(settings.failsafe, now_s)
        self._queue = ActionQueue(rtc_enabled=False, action_dim=self._dim)
        self._latency = WindowedLatencyTracker()
        self._envelope = _envelope(settings)
        self._playback = Playback(settings.fps, settings.command_rate_hz)
        self._threshold_s = self._threshold(chunk_size=0)
        self._work = threading.Event()  # set by the control tick when the worker has something to do
        self._sensors = ObservationAssembler(
            settings.joint_names, settings.camera_names, settings.state_include_velocity, settings.max_observation_age_s
        )
        self._in_flight = InFlight()
        self._identity = SessionIdentity()
        self._seq = 0
        self._last_commanded: np.ndarray | None = None
        self._last_problem = ""
        self._last_rejection = ""  # the server's latest reason for refusing a request, as it said it
        self._known_heard_at = now_s  # the latest heartbeat of the instance the session is with
        self._other_instance = ""  # a second server instance heard on the namespace meanwhile
        self._paused_since: float | None = None
        self._last_heard_s = now_s  # the latest observation sent in this session, or its opening
        self._holders: set[str] = set()  # who holds the executor paused (operator, lifecycle, goal)
        self._task = settings.task
        self._handshake_failures = 0
        self._counts: Counter[str] = Counter()
        self._smoothness = SmoothnessTracker()
        self._last_delay_steps = 0  # the latest merged chunk's latency, in control steps
        self._last_trimmed_rows = 0  # rows of it replace mode skipped
        self._fleet = FleetRecord()

    def change_settings(self, settings: ExecutorSettings) -> None:
        """New settings while streaming (the runtime parameters: safety limits, fallback).

        Swapped with the envelope under the lock, so every control tick uses
        the old ones or the new ones whole, never a mix.
        """
        envelope = _envelope(settings)
        with self._lock:
            self.settings, self._envelope = settings, envelope

    # ------------------------------------------------------------- sensors

    def on_joint_state(self, names, positions, velocities, now_s: float) -> None:
        self._sensors.on_joint_state(names, positions, velocities, now_s)

    def on_camera(self, name: str, msg, now_s: float) -> None:
        self._sensors.on_camera(name, msg, now_s)

    def pull_sensors(self, joint_state=None, cameras=None) -> None:
        """Sources read when a request or a hold needs them (``ObservationAssembler.pull_from``)."""
        self._sensors.pull_from(joint_state, cameras)

    # ------------------------------------------------------------ control tick

    def _row(self, offset: int) -> Row | None:
        peeked = self._queue.peek(offset)
        return None if peeked is None else Row(*peeked)

    def control_tick(self, now_s: float) -> np.ndarray | None:
        """This control tick's command in joint order, or None to publish nothing."""
        with self._lock:
            try:
                return self._control_tick(now_s)
            finally:
                if self._work_due(now_s):
                    self._work.set()

    def _control_tick(self, now_s: float) -> np.ndarray | None:
        position = self._playback.next_position()
        segment = self._playback.segment(position, self._row(0), self._row(1) if position.new_row else None)
        # A row that is playing covers its own period: only a tick due to pop
        # the next row can find the queue empty.
        depth = self._queue.qsize() + (0 if position.new_row else 1)
        decision = self._failsafe.tick(now_s, depth, None if segment is None else segment.age_s(now_s))
        if any(t.to_state is ExecutorState.RECONNECTING for t in decision.transitions):
            self._in_flight.cancel()  # the replica is lost: move now, not at the request timeout
        if decision.clear_queue:
            self._queue.clear()
            self._smoothness.queue_cleared()
        if decision.action is not TickAction.EXECUTE:
            self._playback.stop()
        if decision.action is TickAction.NOTHING:
            return None
        if depth == 0 and not self._failsafe.paused:
            self._counts["starvation_ticks"] += 1
        action = None
        if decision.action is TickAction.EXECUTE:
            if position.new_row:
                self._smoothness.action_executed(self._queue.get())
            self._playback.played(segment)
            action = segment.command()
        if action is None:
            self._counts["fallback_ticks"] += 1
            action = fallback_action(decision.fallback_mode or self.settings.fallback, self._last_commanded,
                                     self._sensors.measured_positions(), self._dim)
            if action is None:
                return None
        reference = self._last_commanded if self._last_commanded is not None else self._sensors.measured_positions()
        result = self._envelope.apply(action, reference)
        if result.intervened:
            self._counts["safety_interventions"] += 1
        if result.action is None:
            return None
        self._last_commanded = result.action
        self._counts["commands_published"] += 1
        return result.action

    # -------------------------------------------------- network worker's side

    def reconnect_due(self, now_s: float) -> bool:
        """Whether the worker should (re-)place the robot now; called only with no request in flight."""
        with self._lock:
            drain = self._fleet.take_drain()
            if drain:
                self._failsafe.on_server_restarted(now_s, drain)
            return self._failsafe.reconnect_due(now_s)

    def request_due(self, now_s: float) -> bool:
        with self._lock:
            return self._request_due()

    def _request_due(self) -> bool:
        if not self._failsafe.accepting_chunks or self._failsafe.paused:
            return False
        return request_due(self._queue.queued_time_s(self.settings.fps), self._threshold_s)

    def _work_due(self, now_s: float) -> bool:
        return self._request_due() or self._failsafe.reconnect_due(now_s)

    def _threshold(self, chunk_size: int, replace_mode: bool = False) -> float:
        return request_threshold_s(self.settings.buffer_time_s, self._latency.p95, self.settings.request_latency_margin,
                                   self.settings.fps, chunk_size, self.settings.max_action_age_s, replace_mode)

    @property
    def request_threshold_s(self) -> float:
        """The queued playback time at which the next request is due (``trigger.py``), as of the latest merge."""
        with self._lock:
            return self._threshold_s

    def wait_for_work(self, timeout_s: float) -> None:
        """The idle network worker's wait: until the control tick says a request or reconnect is due,
        ``wake_worker`` is called, or ``timeout_s`` passes."""
        self._work.wait(timeout_s)
        self._work.clear()

    def wake_worker(self) -> None:
        self._work.set()

    def prepare_request(self, now_s: float, now_ns: int) -> PreparedRequest | NotSent:
        """Assemble the next observation and give it a request id, or say why not."""
        observation = self._sensors.assemble(now_s, self._identity.policy_cameras)
        with self._lock:
            if isinstance(observation, NotSent):
                if observation.too_old:
                    self._counts["observations_too_old"] += 1
                self._last_problem = observation.reason
                return observation
            identity = self._identity
            if identity.policy_cameras is not None:
                # Only what the policy reads (assembled that way; filtered again in case a
                # re-handshake changed the session meanwhile): a robot may have more cameras.
                observation = dataclasses.replace(
                    observation, cameras={n: f for n, f in observation.cameras.items() if n in identity.policy_cameras}
                )
            rtc = identity.rtc_active
            # Also taken in append mode (sent only with RTC): the merge measures
            # how the new chunk continues the rows executed meanwhile.
            snapshot = self._queue.snapshot(max_steps=identity.rtc_horizon or identity.chunk_size)
            delay = self._latency.delay_steps(self.settings.fps) if rtc else 0
            self._seq += 1
            request = RequestId(
                identity.session_id, self.settings.client_id, self._seq, identity.episode, identity.epoch, now_ns
            )
            self._counts["requests_sent"] += 1
            self._last_heard_s = now_s
            return PreparedRequest(request, observation, snapshot, delay, rtc, self._task)

    def begin_request(self, request: RequestId) -> None:
        """``request`` is about to be sent: from now on only its chunk may answer (call before publishing)."""
        with self._lock:
            self._in_flight.start(request, self._identity.model)

    def request_not_sent(self, problem: str) -> None:
        """Publishing the begun request failed: it is over, and ``problem`` is the latest reason."""
        with self._lock:
            self._in_flight.cancel()
            self._last_problem = problem

    def cancel_request(self) -> None:
        """End the request in flight (shutdown): the waiter returns at once, a late chunk is dropped."""
        self._in_flight.cancel()

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None:
        """From the chunk subscription: hand the chunk to the waiting worker, or drop it (the reason code)."""
        return self._in_flight.offer_chunk(chunk, received_ns)

    def drop_chunk(self, code: str, explanation: str) -> None:
        """From the chunk subscription: a chunk message that did not even decode."""
        self._in_flight.drop_chunk(code, explanation)

    def wait_for_answer(self, timeout_s: float) -> Answer:
        """The answer to the request in flight, or why there is none; ends the request."""
        return self._in_flight.wait(timeout_s)

    def merge(self, prepared: PreparedRequest, chunk: ReceivedChunk, received_ns: int, now_s: float) -> bool:
        """Merge the chunk answering ``prepared``; False when it went stale meanwhile."""
        request = prepared.request
        latency_s = max(0.0, (received_ns - request.sent_monotonic_ns) / 1e9)
        with self._lock:
            identity = self._identity
            current = (identity.session_id, identity.episode, identity.epoch)
            if (request.session_id, request.episode, request.epoch) != current or not self._failsafe.accepting_chunks:
                self._in_flight.drop_chunk(
                    "stale_episode", "a reset or reconnect happened while the chunk was on its way"
                )
                return False
            self._latency.add(latency_s)
            self._threshold_s = self._threshold(identity.chunk_size, identity.rtc_active)
            queued_before = self._queue.get_processed_left_over()
            consumed = self._queue.get_action_index() - prepared.snapshot.action_index
            if prepared.snapshot.left_over_robot is not None and consumed > 0:
                self._smoothness.overlap_measured(prepared.snapshot.left_over_robot[:consumed], chunk.actions_robot)
            self._last_delay_steps = control_steps(latency_s, self.settings.fps)
            self._last_trimmed_rows = self._queue.merge(
                chunk.actions_model,
                chunk.actions_robot,
                real_delay=self._last_delay_steps,
                action_index_before_inference=prepared.snapshot.action_index,
                # Age counts from when the oldest sensor sample was read, not
                # from the send: the policy planned from that moment's world.
                source_time_s=request.sent_monotonic_ns / 1e9 - prepared.observation.oldest_age_s,
            )
            self._smoothness.chunk_merged(
                queued_before if queued_before is not None else np.empty((0, self._dim)), self._queue.rtc_enabled
            )
            self._counts["chunks_merged"] += 1
            self._fleet.merged_in_session += 1
            self._failsafe.on_chunk_merged(now_s)
            return True

    def on_request_timeout(self, now_s: float) -> None:
        with self._lock:
            self._counts["request_timeouts"] += 1
            self._failsafe.on_request_timeout(now_s)

    def on_request_refused(self, reason: str, now_s: float) -> None:
        """The server answered with an error (REJECTED/FAILED): a failed request, like a timeout.

        A streak of them re-handshakes, which also recovers a session the
        server has closed meanwhile (e.g. after its idle timeout).
        """
        with self._lock:
            self._last_problem = f"server refused the request: {reason}"
            self._last_rejection = reason
            self._counts["request_rejections"] += 1
            self._failsafe.on_request_timeout(now_s, refusal=reason)

    # ----------------------------------------------------------- connection

    def check_model(self, capabilities: ServerCapabilities, now_s: float) -> str | None:
        """On every re-handshake: the server must serve the model of the first one.

        Returns the reason when it does not (and goes DEAD when this executor
        knows one server only: a fleet skips that replica instead); None when
        it does or when this is the first handshake.
        """
        with self._lock:
            validated = self._identity.model
            if validated is None:
                return None
            difference = validated.difference(ValidatedModel.of(capabilities))
            if difference and len(self.settings.replicas) == 1:
                self._failsafe.on_model_changed(now_s, difference)
            return difference

    def session_opened(self, grant: SessionGrant, instance_id: str, now_s: float, replica: str = "") -> None:
        """A session is open (the first, or a re-opened one, maybe on another replica): the identity is
        replaced as a whole; the queue stays (same model), so playback goes on through a move."""
        capabilities = grant.capabilities
        replica = replica or self.settings.replicas[0]
        with self._lock:
            previous = self._identity
            first = previous.model is None
            self._fleet.take_drain()  # announced by the replica this session replaces
            if not first:
                self._fleet.session_left(previous.replica)
            if not first and replica != previous.replica:
                self._fleet.moved(previous.replica, replica, self._failsafe.reason)
            self._identity = SessionIdentity(
                model=ValidatedModel.of(capabilities) if first else previous.model,
                instance_id=instance_id,
                session_id=grant.session_id,
                rtc_active=grant.rtc_enabled,
                rtc_horizon=capabilities.rtc_execution_horizon,
                chunk_size=capabilities.chunk_size,
                policy_cameras=frozenset(capabilities.camera_names),
                epoch=0 if first else previous.epoch + 1,
                episode=previous.episode,
                replica=replica,
                idle_timeout_s=grant.idle_timeout_s,
            )
            self._last_heard_s = now_s
            if first or grant.rtc_enabled != previous.rtc_active:
                # The merge mode is fixed per queue; a changed mode drops the queued actions.
                self._queue = ActionQueue(rtc_enabled=grant.rtc_enabled, action_dim=self._dim)
                self._smoothness.queue_cleared()
                self._playback.stop()
            self._threshold_s = self._threshold(capabilities.chunk_size, grant.rtc_enabled)
            self._known_heard_at, self._other_instance = now_s, ""
            self._failsafe.on_handshake_ok(now_s)

    def handshake_failed(self, reason: str, now_s: float) -> None:
        with self._lock:
            self._handshake_failures += 1
            self._failsafe.on_handshake_failed(now_s, reason)

    @property
    def unanswered_replicas(self) -> frozenset[str]:
        """Replicas whose latest session with this robot never answered with a chunk (placed last)."""
        with self._lock:
            return self._fleet.unanswered

    def replicas_skipped(self, skipped: tuple[str, ...]) -> None:
        """The latest placement's skipped replicas, each "namespace: why" (for ~/status)."""
        with self._lock:
            self._fleet.skipped = skipped

    def on_heartbeat(self, instance_id: str, now_s: float, replica: str = "", draining: bool = False) -> None:
        """A heartbeat of ``replica`` (default: the only one); only the current replica's counts.

        Another instance while ours still beats is a second server on the
        namespace: reported, never followed (no flapping); once ours is silent
        it is a restart."""
        with self._lock:
            if (replica or self.settings.replicas[0]) != (self._identity.replica or self.settings.replicas[0]):
                return
            known = self._identity.instance_id
            if known and instance_id == known:
                self._known_heard_at = now_s
            elif known and now_s - self._known_heard_at <= self.settings.failsafe.heartbeat_timeout_s:
                self._other_instance = instance_id
                return
            if draining and self._failsafe.accepting_chunks:
                # Moved by the worker once the request in flight is answered: the drain still delivers it.
                self._fleet.drain_announced(f"server {self._identity.replica} announced a drain")
            if known and instance_id != known:
                self._failsafe.on_server_restarted(
                    now_s, f"server restarted (instance {known} -> {instance_id}): its sessions are gone"
                )
                self._in_flight.cancel()  # its answer will never come
            else:
                self._failsafe.on_heartbeat(now_s)

    # ------------------------------------------------------------- operator

    def pause(self, now_s: float, holder: str = "operator") -> None:
        """Hold position (the control tick publishes "hold", nothing is requested) until ``holder`` resumes."""
        with self._lock:
            self._holders.add(holder)
            if self._paused_since is None:
                self._paused_since = now_s
            self._failsafe.pause(now_s)

    def resume(self, now_s: float, holder: str = "operator") -> None:
        """``holder`` lets go; the executor streams again once no other holder is left."""
        with self._lock:
            self._holders.discard(holder)
            if self._holders:
                return
            paused_since, self._paused_since = self._paused_since, None
            self._failsafe.resume(now_s)
            if paused_since is None:
                return
            quiet_s = now_s - self._last_heard_s
            idle_timeout_s = self._identity.idle_timeout_s
            if quiet_s > REOPEN_AT_IDLE_SHARE * idle_timeout_s:
                # Nothing was sent while paused: an observation on a closed session goes
                # nowhere, and two unanswered requests would spend the offline budget.
                self._failsafe.on_server_restarted(
                    now_s, f"resumed after {quiet_s:.1f} s without an observation (the server closes a session "
                    f"after {idle_timeout_s:g} s): re-opening the session"
                )

    def holds(self, holder: str) -> bool:
        with self._lock:
            return holder in self._holders

    def set_task(self, task: str) -> None:
        """The task the next observations carry (a goal's; the ``task`` parameter otherwise)."""
        with self._lock:
            self._task = task

    def clear_queue(self) -> None:
        """Drop the queued actions and the request in flight (a goal begins or ends: they were planned for
        another); the tick holds until the next chunk is merged."""
        with self._lock:
            self._clear_queue()

    def _clear_queue(self) -> None:
        self._queue.clear()
        self._playback.stop()
        self._smoothness.queue_cleared()
        self._in_flight.cancel()

    def end_session(self) -> str:
        """The session is being closed (deactivation): its queue and request in flight are dropped, and a
        chunk still on its way is dropped too (new epoch); returns the session id to close."""
        with self._lock:
            self._clear_queue()
            session_id = self._identity.session_id
            self._identity = dataclasses.replace(self._identity, session_id="", epoch=self._identity.epoch + 1)
            return session_id

    def reopen(self, now_s: float, reason: str) -> None:
        """Open a new session now (activation after a deactivation): the worker re-handshakes."""
        with self._lock:
            self._failsafe.on_server_restarted(now_s, reason)

    def reset_episode(self) -> tuple[str, int]:
        """Clear the queue and bump the episode; returns (session id, new episode) for the server."""
        with self._lock:
            self._queue.clear()
            self._playback.stop()
            self._smoothness.episode_reset()
            self._identity = dataclasses.replace(self._identity, episode=self._identity.episode + 1)
            self._in_flight.cancel()
            return self._identity.session_id, self._identity.episode

    # ------------------------------------------------------------ readers

    @property
    def identity(self) -> SessionIdentity:
        with self._lock:
            return self._identity

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
        """Every unexecuted row, in model and robot space (the RTC parity test reads what the queue built)."""
        return self._queue.snapshot()

    def snapshot(self, now_s: float) -> CoreSnapshot:
        # Percentiles sort the window: read them under the tracker's own lock,
        # not the core's, which the control tick needs.
        latency_p50, latency_p95, latency_max = self._latency.p50, self._latency.p95, self._latency.max
        with self._lock:
            identity, failsafe, smoothness = self._identity, self._failsafe, self._smoothness
            drops = self._in_flight.drops()
            depth = self._queue.qsize()
            telemetry = ExecutorTelemetry(
                client_id=self.settings.client_id,
                session_id=identity.session_id,
                server_namespace=identity.replica or self.settings.replicas[0],
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
                last_delay_steps=self._last_delay_steps,
                last_trimmed_rows=self._last_trimmed_rows,
                chunk_boundaries=smoothness.boundaries,
                boundary_jump_mean=smoothness.jump_mean,
                boundary_jump_max=smoothness.jump_max,
                action_step_mean=smoothness.step_mean,
                prefix_deviation_mean=smoothness.deviation_mean,
                prefix_deviation_max=smoothness.deviation_max,
                request_threshold_s=self._threshold_s,
                last_rejection_reason=self._last_rejection,
                other_server_instance=self._other_instance,
                task=self._task or self.settings.task,
                **{name: self._counts[name] for name in COUNTERS},
                replicas=self.settings.replicas,
                replica_moves=self._fleet.moves,
                last_move_reason=self._fleet.last_move,
                replicas_skipped=self._fleet.skipped,
                last_drop_reason=drops.last,
            )
            return CoreSnapshot(telemetry, identity, self._last_problem, drops, self._queue.next_action_age_s(now_s),
                                self._handshake_failures, failsafe.last_handshake_error)
