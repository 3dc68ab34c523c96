"""The executor's control tick and request cycle, shared by the control loop, the chunk
subscription and the worker.

Composes the finished plain parts — ``ActionQueue``, ``WindowedLatencyTracker``,
``SafetyEnvelope``, ``FailSafe``, ``SessionState``, ``InFlight`` — with the
observation holders, and offers callers verbs only: nothing outside reads or
writes its parts. Invariants enforced here:

* the control tick never blocks and never touches the network: it asks the
  fail-safe what to do, pops at most one action, passes whatever it will
  publish through the safety envelope, and returns it; at a control rate
  above ``fps`` it commands the point between the playing action and the
  next one (``interpolation.Playback``), and the fail-safe judges that
  segment's older end, every tick;
* the next request is due only when the queued playback time is at most the
  request threshold (``trigger.request_threshold_s``: ``buffer_time_s`` or
  more when the round trip needs it), with a session open and not held;
  the control tick wakes the network worker when it is (or a reconnect is)
  due, so the idle worker waits on an event, not a poll;
* one request goes through one sequence: ``start_request`` assembles,
  numbers and puts it in flight (``PendingRequest``), the worker publishes
  it, ``complete_request`` waits for its answer and merges it, or counts the
  refusal or timeout;
* a merged chunk answers exactly the latest request of the current session,
  episode and epoch; its rows carry their observation's sensor time so the
  staleness bound holds per row;
* a move to another replica (``replicas.py``) keeps the queue playing: the
  next request carries its RTC prefix, and the new session's epoch drops any
  chunk of the old replica; a drain the current replica announces moves the
  robot once the request in flight is answered (its chunk is still merged),
  a lost replica cancels the request in flight at once. What a session,
  heartbeat or hold means is decided by ``session_state.py``; the core
  applies it to the fail-safe, the queue and the request in flight;
* in a fleet with ``standby_session``, a warm standby session is kept on a
  second replica (``hedging.py``): a request late past the hedge deadline is
  sent there too (``start_hedge``) and the first valid answer is merged; the
  standby's answer, or the serving replica lost, promotes the standby into
  the session at once (no placement), and the worker opens a new standby.

Plain Python and thread-safe: one lock guards the fail-safe and the session
state (neither thread-safe itself), the counters and the smoothness figures;
the queue, latency tracker, in-flight request and sensor holders have their
own locks and are taken after the core's, never before. Readers get frozen
values (``identity``, ``snapshot``, ``transitions_since``). Times are the
executor's monotonic clock: ``now_s`` in seconds, ``*_ns`` in nanoseconds.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from lerobot_ros.executor.control.action_queue import ActionQueue, QueueSnapshot
from lerobot_ros.executor.control.failsafe_config import fallback_action
from lerobot_ros.executor.control.interpolation import Playback, Row, step_per_tick
from lerobot_ros.executor.control.safety import SafetyEnvelope
from lerobot_ros.executor.control.smoothness import SmoothnessTracker
from lerobot_ros.executor.control.state_machine import FailSafe, TickAction, Transition
from lerobot_ros.executor.fleet.failover_verbs import FailoverVerbs
from lerobot_ros.executor.fleet.hedging import Standby, hedge_allowance_s
from lerobot_ros.executor.requests.answer_rules import Answer, Drops, InFlight
from lerobot_ros.executor.requests.latency import WindowedLatencyTracker, control_steps
from lerobot_ros.executor.requests.observation_assembly import NotSent, ObservationAssembler
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.session_state import SessionIdentity, SessionState
from lerobot_ros.executor.session.session_verbs import SessionVerbs
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.telemetry import ExecutorTelemetry
from lerobot_ros.protocol.trigger import request_threshold_s
from lerobot_ros.protocol.wire.data_plane import ReceivedChunk, RequestId

#: The counters since start-up, named as in ExecutorTelemetry.
COUNTERS = (
    "commands_published",
    "requests_sent",
    "chunks_merged",
    "request_timeouts",
    "starvation_ticks",
    "fallback_ticks",
    "observations_too_old",
    "safety_interventions",
    "request_rejections",
    "hedges_sent",
    "hedges_won",
    "standby_promotions",
)


def request_due(queued_time_s: float, buffer_time_s: float) -> bool:
    """The trigger rule: ask for the next chunk when the queue covers at most the buffer time."""
    return queued_time_s <= buffer_time_s


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


def _envelope(settings: ExecutorSettings) -> SafetyEnvelope:
    """The safety envelope the settings ask for, its step limit per control tick."""
    return SafetyEnvelope.from_parameters(
        settings.joint_names,
        settings.joint_lower_limits,
        settings.joint_upper_limits,
        step_per_tick(settings.max_step_per_tick, settings.fps, settings.command_rate_hz),
        reject_non_finite=settings.reject_non_finite,
    )


class ExecutorCore(SessionVerbs, FailoverVerbs):
    """The control tick, the request cycle and the readers; the session's verbs are
    ``SessionVerbs``."""

    def __init__(self, settings: ExecutorSettings, now_s: float) -> None:
        self.settings = settings  # frozen; replaced whole by change_settings
        self._dim = len(settings.joint_names)
        self._lock = threading.Lock()
        self._failsafe = FailSafe(settings.failsafe, now_s)
        self._session = SessionState(
            settings.replicas, settings.failsafe.heartbeat_timeout_s, settings.task, now_s
        )
        self._queue = ActionQueue(rtc_enabled=False, action_dim=self._dim)
        self._latency = WindowedLatencyTracker()
        self._envelope = _envelope(settings)
        self._playback = Playback(settings.fps, settings.command_rate_hz)
        self._standby: Standby | None = None
        self._standby_retry_at = now_s
        self._standby_problem = (
            ""  # why no standby is armed now ("" while one is, or none is wanted)
        )
        self._threshold_s = self._threshold(chunk_size=0)
        # set by the control tick when the worker has something to do
        self._work = threading.Event()
        # One handshake at a time: the worker's re-handshakes and the operator's (activate,
        # ~/resume).
        self.handshaking = threading.Lock()
        self._sensors = ObservationAssembler(
            settings.joint_names,
            settings.camera_names,
            settings.state_include_velocity,
            settings.max_observation_age_s,
        )
        self._in_flight = InFlight()
        self._seq = 0
        self._last_commanded: np.ndarray | None = None
        self._last_problem = ""
        self._last_rejection = (
            ""  # the server's latest reason for refusing a request, as it said it
        )
        self._counts: Counter[str] = Counter()
        self._smoothness = SmoothnessTracker()
        self._last_delay_steps = 0  # the latest merged chunk's latency, in control steps
        self._last_trimmed_rows = 0  # rows of it replace mode skipped

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
        """Sources read when a request or a hold needs them
        (``ObservationAssembler.pull_from``)."""
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
        segment = self._playback.segment(
            position, self._row(0), self._row(1) if position.new_row else None
        )
        # A row that is playing covers its own period: only a tick due to pop
        # the next row can find the queue empty.
        depth = self._queue.qsize() + (0 if position.new_row else 1)
        decision = self._failsafe.tick(
            now_s, depth, None if segment is None else segment.age_s(now_s)
        )
        if (
            any(t.to_state is ExecutorState.RECONNECTING for t in decision.transitions)
            and not self._in_flight.hedged
        ):
            # lost: move now, not at the request timeout (a hedge racing may still win)
            self._in_flight.cancel()
        if decision.clear_queue:
            self._queue.clear()
            self._smoothness.queue_cleared()
        if decision.action is not TickAction.EXECUTE:
            self._playback.stop()
        if decision.action is TickAction.NOTHING:
            return None
        if (
            depth == 0
            and not self._failsafe.paused
            and decision.state is not ExecutorState.OFFLINE
        ):
            self._counts["starvation_ticks"] += 1  # OFFLINE holds on purpose: not a starved queue
        action = None
        if decision.action is TickAction.EXECUTE:
            if position.new_row:
                self._smoothness.action_executed(self._queue.get())
            self._playback.played(segment)
            action = segment.command()
        if action is None:
            self._counts["fallback_ticks"] += 1
            action = fallback_action(
                decision.fallback_mode or self.settings.fallback,
                self._last_commanded,
                self._sensors.measured_positions(),
                self._dim,
            )
            if action is None:
                return None
        reference = (
            self._last_commanded
            if self._last_commanded is not None
            else self._sensors.measured_positions()
        )
        result = self._envelope.apply(action, reference)
        if result.intervened:
            self._counts["safety_interventions"] += 1
        if result.action is None:
            return None
        self._last_commanded = result.action
        self._counts["commands_published"] += 1
        return result.action

    # ------------------------------------------------------- request cycle

    def reconnect_due(self, now_s: float) -> bool:
        """Whether the worker should (re-)place the robot now; called only with no request in
        flight."""
        with self._lock:
            drain = self._session.fleet.take_drain()
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
        p95 = self._latency.p95
        allowance = (
            hedge_allowance_s(self._hedge_deadline_s(), p95) if self._standby is not None else 0.0
        )
        return request_threshold_s(
            self.settings.buffer_time_s,
            p95,
            self.settings.request_latency_margin,
            self.settings.fps,
            chunk_size,
            self.settings.max_action_age_s,
            replace_mode,
            hedge_allowance_s=allowance,
        )

    @property
    def request_threshold_s(self) -> float:
        """The queued playback time at which the next request is due (``trigger.py``), as of the
        latest merge."""
        with self._lock:
            return self._threshold_s

    def wait_for_work(self, timeout_s: float) -> None:
        """The idle network worker's wait: until the control tick says a request or reconnect is
        due,
        ``wake_worker`` is called, or ``timeout_s`` passes."""
        self._work.wait(timeout_s)
        self._work.clear()

    def wake_worker(self) -> None:
        self._work.set()

    def start_request(self, now_s: float, now_ns: int) -> PendingRequest | NotSent:
        """The next request, assembled from the newest sensor data, numbered and in flight from now
        on
        (so only its chunk may answer: call before publishing it); or why none can be sent."""
        observation = self._sensors.assemble(now_s, self.identity.policy_cameras)
        with self._lock:
            if isinstance(observation, NotSent):
                if observation.too_old:
                    self._counts["observations_too_old"] += 1
                self._last_problem = observation.reason
                return observation
            identity = self._session.identity
            pending = self._numbered(
                observation, now_ns, identity.session_id, identity.epoch, identity.replica
            )
            self._session.observation_sent(now_s)
            self._in_flight.start(pending.request, identity.model)
            return pending

    def _numbered(
        self, observation, now_ns: int, session_id: str, epoch: int, replica: str
    ) -> PendingRequest:
        """A request of ``observation`` for one session (under the lock): ids, the queue snapshot,
        the delay."""
        identity = self._session.identity
        if identity.policy_cameras is not None:
            # Only what the policy reads (assembled that way; filtered again in case a
            # re-handshake changed the session meanwhile): a robot may have more cameras.
            observation = dataclasses.replace(
                observation,
                cameras={
                    n: f for n, f in observation.cameras.items() if n in identity.policy_cameras
                },
            )
        mapping = self.settings.mapping
        if mapping.changes_units:  # the policy reads its own units (joint_mapping.py)
            observation = dataclasses.replace(
                observation, state=mapping.state_to_policy(observation.state)
            )
        rtc = identity.rtc_active
        # Also taken in append mode (sent only with RTC): the merge measures
        # how the new chunk continues the rows executed meanwhile.
        snapshot = self._queue.snapshot(max_steps=identity.rtc_horizon or identity.chunk_size)
        delay = self._latency.delay_steps(self.settings.fps) if rtc else 0
        self._seq += 1
        request = RequestId(
            session_id, self.settings.client_id, self._seq, identity.episode, epoch, now_ns
        )
        self._counts["requests_sent"] += 1
        return PendingRequest(
            request,
            observation,
            snapshot,
            delay,
            rtc,
            self._session.task,
            self.settings.jpeg_quality,
            identity.camera_sizes if self.settings.resize_to_policy else None,
            mapping,
            replica,
        )

    def cancel_request(self) -> None:
        """End the request in flight (shutdown): the waiter returns at once, a late chunk is
        dropped."""
        self._in_flight.cancel()

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None:
        """From the chunk subscription: hand the chunk to the waiting worker, or drop it (the
        reason code)."""
        return self._in_flight.offer_chunk(chunk, received_ns)

    def drop_chunk(self, code: str, explanation: str) -> None:
        """From the chunk subscription: a chunk message that did not even decode."""
        self._in_flight.drop_chunk(code, explanation)

    def wait_for_answer(self, timeout_s: float) -> Answer:
        """The answer to the request in flight, or why there is none; ends the request."""
        return self._in_flight.wait(timeout_s)

    def merge(
        self, pending: PendingRequest, chunk: ReceivedChunk, received_ns: int, now_s: float
    ) -> bool:
        """Merge the chunk answering ``pending``; False when it went stale meanwhile."""
        request = pending.request
        latency_s = max(0.0, (received_ns - request.sent_monotonic_ns) / 1e9)
        # the policy's units -> the robot's
        actions_robot = self.settings.mapping.to_robot(chunk.actions_robot)
        with self._lock:
            self._promote_if_standby_answered(request, now_s)
            identity = self._session.identity
            current = (identity.session_id, identity.episode, identity.epoch)
            if (
                request.session_id,
                request.episode,
                request.epoch,
            ) != current or not self._failsafe.accepting_chunks:
                self._in_flight.drop_chunk(
                    "stale_episode", "a reset or reconnect happened while the chunk was on its way"
                )
                return False
            self._latency.add(latency_s)
            self._threshold_s = self._threshold(identity.chunk_size, identity.rtc_active)
            queued_before = self._queue.get_processed_left_over()
            consumed = self._queue.get_action_index() - pending.snapshot.action_index
            if pending.snapshot.left_over_robot is not None and consumed > 0:
                self._smoothness.overlap_measured(
                    pending.snapshot.left_over_robot[:consumed], actions_robot
                )
            self._last_delay_steps = control_steps(latency_s, self.settings.fps)
            self._last_trimmed_rows = self._queue.merge(
                chunk.actions_model,
                actions_robot,
                real_delay=self._last_delay_steps,
                action_index_before_inference=pending.snapshot.action_index,
                # Age counts from when the oldest sensor sample was read, not
                # from the send: the policy planned from that moment's world.
                source_time_s=request.sent_monotonic_ns / 1e9 - pending.observation.oldest_age_s,
            )
            self._smoothness.chunk_merged(
                queued_before if queued_before is not None else np.empty((0, self._dim)),
                self._queue.rtc_enabled,
            )
            self._counts["chunks_merged"] += 1
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
            if refusal:
                self._last_problem = f"server refused the request: {refusal}"
                self._last_rejection = refusal
                self._counts["request_rejections"] += 1
            else:
                self._counts["request_timeouts"] += 1
            self._failsafe.on_request_timeout(now_s, refusal=refusal)

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
        """Every unexecuted row, in model and robot space (the RTC parity test reads what the queue
        built)."""
        return self._queue.snapshot()

    def snapshot(self, now_s: float) -> CoreSnapshot:
        # Percentiles sort the window: read them under the tracker's own lock,
        # not the core's, which the control tick needs.
        latency_p50, latency_p95, latency_max = (
            self._latency.p50,
            self._latency.p95,
            self._latency.max,
        )
        with self._lock:
            session, failsafe, smoothness = self._session, self._failsafe, self._smoothness
            identity = session.identity
            drops = self._in_flight.drops()
            depth = self._queue.qsize()
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
                other_server_instance=session.other_instance,
                task=session.task or self.settings.task,
                **{name: self._counts[name] for name in COUNTERS},
                replicas=session.fleet.replicas,
                replica_moves=session.fleet.moves,
                last_move_reason=session.fleet.last_move,
                replicas_skipped=session.fleet.skipped,
                last_drop_reason=drops.last,
                standby_replica=self._standby.replica if self._standby is not None else "",
                hedge_answers_dropped=drops.counts.get("hedge_lost", 0),
                hedge_deadline_ms=self._hedge_deadline_ms() if self._standby is not None else 0.0,
            )
            return CoreSnapshot(
                telemetry,
                identity,
                self._last_problem,
                drops,
                self._queue.next_action_age_s(now_s),
                session.handshake_failures,
                failsafe.last_handshake_error,
                self._standby_problem,
            )
