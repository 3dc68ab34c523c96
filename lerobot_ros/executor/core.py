"""The executor's state, shared by the control timer and the network worker.

Composes the finished plain parts — ``ActionQueue``, ``WindowedLatencyTracker``,
``SafetyEnvelope``, ``FailSafe`` — with the observation holders and the
request in flight. Invariants enforced here:

* the control tick never blocks and never touches the network: it asks the
  fail-safe what to do, pops at most one action, passes whatever it will
  publish through the safety envelope, and returns it;
* the next request is due only when the queued playback time is at most
  ``buffer_time_s`` (``request_due``), with a session open and not paused;
* a merged chunk answers exactly the latest request of the current session,
  episode and epoch; its rows carry their observation's send time so the
  staleness bound holds per row;
* the model validated by the FIRST handshake is the only one ever executed.

Plain Python and thread-safe: one lock guards the fail-safe and the
counters (the fail-safe itself is not thread-safe); the queue, latency
tracker and holders have their own locks. Times are the executor's
monotonic clock: ``now_s`` in seconds, ``*_ns`` in nanoseconds.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from dataclasses import dataclass

import numpy as np

from lerobot_ros.contract import ServerCapabilities
from lerobot_ros.data_plane import ReceivedChunk, RequestId
from lerobot_ros.executor.action_queue import ActionQueue, QueueSnapshot
from lerobot_ros.executor.chunks import InFlight, ValidatedModel
from lerobot_ros.executor.latency import WindowedLatencyTracker
from lerobot_ros.executor.observation import AssembledObservation, NotSent, ObservationAssembler
from lerobot_ros.executor.safety import SafetyEnvelope
from lerobot_ros.executor.smoothness import SmoothnessTracker
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.executor.state_machine import ExecutorState, FailSafe, TickAction, fallback_action
from lerobot_ros.telemetry import ExecutorTelemetry


#: A pause longer than this re-opens the session on resume (seconds): the server
#: closes sessions that sent nothing for its session_idle_timeout_s (10 s by default).
REOPEN_AFTER_PAUSE_S = 5.0


def request_due(queued_time_s: float, buffer_time_s: float) -> bool:
    """The trigger rule: ask for the next chunk when the queue covers at most the buffer time."""
    return queued_time_s <= buffer_time_s


@dataclass(frozen=True)
class SessionGrant:
    """An accepted OpenSession, as plain values."""

    session_id: str
    rtc_enabled: bool
    observation_topic: str
    action_chunk_topic: str
    capabilities: ServerCapabilities
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class PreparedRequest:
    """One request about to be sent, and what its merge needs later."""

    request: RequestId
    observation: AssembledObservation
    snapshot: QueueSnapshot
    inference_delay_steps: int  # 0 unless RTC is on
    rtc: bool


class ExecutorCore:
    def __init__(self, settings: ExecutorSettings, now_s: float) -> None:
        self.settings = settings
        self.dim = len(settings.joint_names)
        self._lock = threading.Lock()
        self.failsafe = FailSafe(settings.failsafe, now_s)
        self.queue = ActionQueue(rtc_enabled=False, action_dim=self.dim)
        self.latency = WindowedLatencyTracker()
        self.envelope = SafetyEnvelope.from_parameters(
            settings.joint_names,
            settings.joint_lower_limits,
            settings.joint_upper_limits,
            settings.max_step_per_tick,
            reject_non_finite=settings.reject_non_finite,
        )
        self.sensors = ObservationAssembler(
            settings.joint_names, settings.camera_names, settings.state_include_velocity, settings.max_observation_age_s
        )
        self.in_flight = InFlight()
        # Session identity: the model of the FIRST handshake, the current session.
        self.model: ValidatedModel | None = None
        self.instance_id = ""
        self.session_id = ""
        self.rtc_active = False
        self.rtc_horizon = 0
        self.chunk_size = 0
        self.epoch = 0
        self.episode = 0
        self._seq = 0
        self._sessions_opened = 0
        self.last_commanded: np.ndarray | None = None
        self.last_problem = ""  # the latest reason a request could not be sent
        self._paused_since: float | None = None
        self.policy_cameras: frozenset[str] | None = None  # known once a session is open
        # Counters since start-up.
        self.commands_published = 0
        self.requests_sent = 0
        self.chunks_merged = 0
        self.request_timeouts = 0
        self.starvation_ticks = 0
        self.fallback_ticks = 0
        self.observations_too_old = 0
        self.safety_interventions = 0
        self.smoothness = SmoothnessTracker()
        self.last_delay_steps = 0  # the latest merged chunk's latency, in control steps
        self.last_trimmed_rows = 0  # rows of it replace mode skipped

    # ------------------------------------------------------------ control tick

    def control_tick(self, now_s: float) -> np.ndarray | None:
        """This period's command in joint order, or None to publish nothing."""
        with self._lock:
            depth = self.queue.qsize()
            decision = self.failsafe.tick(now_s, depth, self.queue.next_action_age_s(now_s))
            if decision.clear_queue:
                self.queue.clear()
                self.smoothness.queue_cleared()
            if decision.action is TickAction.NOTHING:
                return None
            if depth == 0 and not self.failsafe.paused:
                self.starvation_ticks += 1
            action = self.queue.get() if decision.action is TickAction.EXECUTE else None
            if action is not None:
                self.smoothness.action_executed(action)
            measured = self.sensors.measured_positions()
            if action is None:
                self.fallback_ticks += 1
                action = fallback_action(
                    decision.fallback_mode or self.settings.fallback, self.last_commanded, measured, self.dim
                )
                if action is None:
                    return None
            reference = self.last_commanded if self.last_commanded is not None else measured
            result = self.envelope.apply(action, reference)
            if result.intervened:
                self.safety_interventions += 1
            if result.action is None:
                return None
            self.last_commanded = result.action
            self.commands_published += 1
            return result.action

    # -------------------------------------------------- network worker's side

    def reconnect_due(self, now_s: float) -> bool:
        with self._lock:
            return self.failsafe.reconnect_due(now_s)

    def request_due(self, now_s: float) -> bool:
        with self._lock:
            if not self.failsafe.accepting_chunks or self.failsafe.paused:
                return False
        return request_due(self.queue.queued_time_s(self.settings.fps), self.settings.buffer_time_s)

    def prepare_request(self, now_s: float, now_ns: int) -> PreparedRequest | NotSent:
        """Assemble the next observation and give it a request id, or say why not."""
        observation = self.sensors.assemble(now_s)
        with self._lock:
            if isinstance(observation, NotSent):
                if observation.too_old:
                    self.observations_too_old += 1
                self.last_problem = observation.reason
                return observation
            if self.policy_cameras is not None:
                # Only what the policy reads: a robot may have more cameras than the
                # policy, and the server refuses cameras it does not know.
                observation = dataclasses.replace(
                    observation, cameras={n: f for n, f in observation.cameras.items() if n in self.policy_cameras}
                )
            rtc = self.rtc_active
            # Also taken in append mode (sent only with RTC): the merge measures
            # how the new chunk continues the rows executed meanwhile.
            snapshot = self.queue.snapshot(max_steps=self.rtc_horizon or self.chunk_size)
            delay = self.latency.delay_steps(self.settings.fps) if rtc else 0
            self._seq += 1
            request = RequestId(self.session_id, self.settings.client_id, self._seq, self.episode, self.epoch, now_ns)
            self.requests_sent += 1
            return PreparedRequest(request, observation, snapshot, delay, rtc)

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None:
        """From the chunk subscription: hand the chunk to the waiting worker or drop it."""
        model = self.model
        if model is None:
            self.in_flight.drop("late", "chunk arrived before any session was opened")
            return "late"
        return self.in_flight.offer(chunk, model, received_ns)

    def merge(self, prepared: PreparedRequest, chunk: ReceivedChunk, received_ns: int, now_s: float) -> bool:
        """Merge the chunk answering ``prepared``; False when it went stale meanwhile."""
        request = prepared.request
        latency_s = max(0.0, (received_ns - request.sent_monotonic_ns) / 1e9)
        with self._lock:
            current = (self.session_id, self.episode, self.epoch)
            if (request.session_id, request.episode, request.epoch) != current or not self.failsafe.accepting_chunks:
                self.in_flight.drop("stale_episode", "a reset or reconnect happened while the chunk was on its way")
                return False
            self.latency.add(latency_s)
            queued_before = self.queue.get_processed_left_over()
            consumed = self.queue.get_action_index() - prepared.snapshot.action_index
            if prepared.snapshot.left_over_robot is not None and consumed > 0:
                self.smoothness.overlap_measured(prepared.snapshot.left_over_robot[:consumed], chunk.actions_robot)
            self.last_delay_steps = math.ceil(latency_s * self.settings.fps - 1e-9)
            self.last_trimmed_rows = self.queue.merge(
                chunk.actions_model,
                chunk.actions_robot,
                real_delay=self.last_delay_steps,
                action_index_before_inference=prepared.snapshot.action_index,
                # Age counts from when the oldest sensor sample was read, not
                # from the send: the policy planned from that moment's world.
                source_time_s=request.sent_monotonic_ns / 1e9 - prepared.observation.oldest_age_s,
            )
            self.smoothness.chunk_merged(
                queued_before if queued_before is not None else np.empty((0, self.dim)), self.queue.rtc_enabled
            )
            self.chunks_merged += 1
            self.failsafe.on_chunk_merged(now_s)
            return True

    def on_request_timeout(self, now_s: float) -> None:
        with self._lock:
            self.request_timeouts += 1
            self.failsafe.on_request_timeout(now_s)

    def on_request_refused(self, reason: str, now_s: float) -> None:
        """The server answered with an error (REJECTED/FAILED): a failed request, like a timeout.

        A streak of them re-handshakes, which also recovers a session the
        server has closed meanwhile (e.g. after its idle timeout).
        """
        with self._lock:
            self.last_problem = f"server refused the request: {reason}"
            self.failsafe.on_request_timeout(now_s)

    # ----------------------------------------------------------- connection

    def check_model(self, capabilities: ServerCapabilities, now_s: float) -> str | None:
        """On every re-handshake: the server must serve the model of the first one.

        Returns the reason (and goes DEAD) when it does not; None when it does
        or when this is the first handshake.
        """
        offered = ValidatedModel(capabilities.model_fingerprint, capabilities.model_revision, capabilities.action_names)
        with self._lock:
            if self.model is None:
                return None
            difference = self.model.difference(offered)
            if difference:
                self.failsafe.on_model_changed(now_s, difference)
            return difference

    def session_opened(self, grant: SessionGrant, instance_id: str, now_s: float) -> None:
        capabilities = grant.capabilities
        with self._lock:
            if self.model is None:
                self.model = ValidatedModel(
                    capabilities.model_fingerprint, capabilities.model_revision, capabilities.action_names
                )
            else:
                self.epoch += 1
            self._sessions_opened += 1
            self.instance_id = instance_id
            self.session_id = grant.session_id
            self.chunk_size = capabilities.chunk_size
            self.policy_cameras = frozenset(capabilities.camera_names)
            self.rtc_horizon = capabilities.rtc_execution_horizon
            if grant.rtc_enabled != self.rtc_active or self._sessions_opened == 1:
                # The merge mode is fixed per queue; a changed mode drops the queued actions.
                self.queue = ActionQueue(rtc_enabled=grant.rtc_enabled, action_dim=self.dim)
                self.smoothness.queue_cleared()
            self.rtc_active = grant.rtc_enabled
            self.failsafe.on_handshake_ok(now_s)

    def handshake_failed(self, reason: str, now_s: float) -> None:
        with self._lock:
            self.failsafe.on_handshake_failed(now_s, reason)

    def on_heartbeat(self, instance_id: str, now_s: float) -> None:
        with self._lock:
            if self.instance_id and instance_id != self.instance_id:
                self.failsafe.on_server_restarted(
                    now_s, f"server restarted (instance {self.instance_id} -> {instance_id}): its sessions are gone"
                )
            else:
                self.failsafe.on_heartbeat(now_s)

    # ------------------------------------------------------------- operator

    def pause(self, now_s: float) -> None:
        with self._lock:
            if self._paused_since is None:
                self._paused_since = now_s
            self.failsafe.pause(now_s)

    def resume(self, now_s: float) -> None:
        with self._lock:
            paused_since, self._paused_since = self._paused_since, None
            self.failsafe.resume(now_s)
            paused_s = now_s - paused_since if paused_since is not None else 0.0
            if paused_s > REOPEN_AFTER_PAUSE_S:
                # Nothing was sent while paused, so the server may have closed
                # the session as idle; re-open it now rather than after two
                # unanswered requests.
                self.failsafe.on_server_restarted(
                    now_s, f"resumed after a {paused_s:.0f} s pause: re-opening the session"
                )

    def reset_episode(self) -> tuple[str, int]:
        """Clear the queue and bump the episode; returns (session id, new episode) for the server."""
        with self._lock:
            self.queue.clear()
            self.smoothness.episode_reset()
            self.episode += 1
            self.in_flight.cancel()
            return self.session_id, self.episode

    # ------------------------------------------------------------ telemetry

    @property
    def state(self) -> ExecutorState:
        with self._lock:
            return self.failsafe.state

    def telemetry(self, now_s: float) -> ExecutorTelemetry:
        with self._lock:
            state = self.failsafe.state
            reason = self.failsafe.reason
            paused = self.failsafe.paused
        depth = self.queue.qsize()
        return ExecutorTelemetry(
            client_id=self.settings.client_id,
            session_id=self.session_id,
            server_namespace=self.settings.server_namespace,
            state=int(state),
            state_name=state.name,
            reason=reason,
            paused=paused,
            episode=self.episode,
            epoch=self.epoch,
            rtc_active=self.rtc_active,
            queue_depth=depth,
            queued_time_s=depth / self.settings.fps,
            latency_ms_p50=self.latency.p50 * 1000.0,
            latency_ms_p95=self.latency.p95 * 1000.0,
            latency_ms_max=self.latency.max * 1000.0,
            commands_published=self.commands_published,
            requests_sent=self.requests_sent,
            chunks_merged=self.chunks_merged,
            chunks_dropped=self.in_flight.dropped_total,
            request_timeouts=self.request_timeouts,
            starvation_ticks=self.starvation_ticks,
            fallback_ticks=self.fallback_ticks,
            observations_too_old=self.observations_too_old,
            safety_interventions=self.safety_interventions,
            fallback=self.settings.fallback,
            last_delay_steps=self.last_delay_steps,
            last_trimmed_rows=self.last_trimmed_rows,
            chunk_boundaries=self.smoothness.boundaries,
            boundary_jump_mean=self.smoothness.jump_mean,
            boundary_jump_max=self.smoothness.jump_max,
            action_step_mean=self.smoothness.step_mean,
            prefix_deviation_mean=self.smoothness.deviation_mean,
            prefix_deviation_max=self.smoothness.deviation_max,
        )
