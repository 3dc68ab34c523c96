"""Plain snapshots of a node's health, converted to messages by ``wire``."""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

from lerobot_ros.protocol.statistics import WindowedDurations

#: Period of both nodes' /diagnostics: diagnostic_updater's default, what rqt_robot_monitor
#: expects.
DIAGNOSTICS_PERIOD_S = 1.0


@dataclass(frozen=True)
class ServerHealth:
    """Everything in a ServerStatus heartbeat besides the capabilities."""

    instance_id: str
    server_namespace: str
    heartbeat_seq: int
    ready: bool
    draining: bool
    uptime_s: float
    active_sessions: int = 0
    max_sessions: int = 0
    # Sessions waiting as warm standbys (server/sessions.py), included in active_sessions.
    standby_sessions: int = 0
    pending_requests: int = 0
    utilization: float = 0.0
    requests_served: int = 0
    requests_rejected: int = 0
    observations_superseded: int = 0
    inference_ms_p50: float = 0.0
    inference_ms_p95: float = 0.0
    max_batch_size: int = 1
    batch_size_mean: float = 0.0
    forwards: int = 0
    # The capacity model (server/capacity_gate.py): robots like the probe that still fit
    # latency_budget_ms (-1: unknown: no budget, or nothing measured yet) and the p95 round trip it
    # predicts for the sessions now.
    headroom_robots: int = -1
    predicted_p95_ms: float = 0.0
    latency_budget_ms: float = 0.0
    # Per client id, index-aligned (server/arrival_guard.py's report).
    refused_client_ids: tuple[str, ...] = ()
    refused_on_arrival: tuple[int, ...] = ()
    refused_last_reasons: tuple[str, ...] = ()
    reopen_refused_for_s: tuple[float, ...] = ()


class ServerStats:
    """Counters and a recent window of inference durations, updated by the worker.

    Utilization is the share of the recent window's wall time the worker spent
    in inference, so an operator can read how close the server is to capacity
    (capacity per GPU is about 0.8 / (request rate x inference time)).
    """

    def __init__(self, window: int = 200, clock=None) -> None:
        self._clock = clock or time.monotonic
        self._lock = threading.Lock()
        # (finished_at, seconds)
        self._inference: deque[tuple[float, float]] = deque(maxlen=window)
        self._durations = WindowedDurations(window)
        self.requests_served = 0
        self.requests_rejected = 0
        self.requests_failed = 0
        self.observations_superseded = 0
        self._batch_sizes: deque[int] = deque(maxlen=window)
        self.forwards = 0

    def record(
        self, outcome: str, inference_s: float, superseded: int, batch_size: int = 1
    ) -> None:
        """One answered request; ``inference_s`` is its forward pass's, shared by ``batch_size``
        requests."""
        with self._lock:
            self.observations_superseded += superseded
            if outcome == "ok":
                self.requests_served += 1
                # A forward pass shared by n requests is busy time once, not n times.
                self._inference.append((self._clock(), inference_s / max(1, batch_size)))
                self._durations.add(inference_s)
            elif outcome == "failed":
                self.requests_failed += 1
            else:
                self.requests_rejected += 1

    def record_forward(self, batch_size: int) -> None:
        with self._lock:
            self.forwards += 1
            self._batch_sizes.append(batch_size)

    def batch_size_mean(self) -> float:
        """Mean requests per forward pass over the recent window (0 before the first)."""
        with self._lock:
            return sum(self._batch_sizes) / len(self._batch_sizes) if self._batch_sizes else 0.0

    def inference_percentiles_ms(self) -> tuple[float, float]:
        return self._durations.p50 * 1000.0, self._durations.p95 * 1000.0

    def utilization(self, horizon_s: float = 10.0) -> float:
        now = self._clock()
        with self._lock:
            busy = sum(
                seconds for finished, seconds in self._inference if now - finished <= horizon_s
            )
        return min(1.0, busy / horizon_s)


@dataclass(frozen=True)
class ExecutorTelemetry:
    """Everything in an ExecutorStatus besides the header (same field names)."""

    client_id: str
    session_id: str
    server_namespace: str
    state: int
    state_name: str
    reason: str
    paused: bool
    episode: int
    epoch: int
    rtc_active: bool
    queue_depth: int
    queued_time_s: float
    latency_ms_p50: float
    latency_ms_p95: float
    latency_ms_max: float
    commands_published: int
    requests_sent: int
    chunks_merged: int
    chunks_dropped: int
    request_timeouts: int
    starvation_ticks: int
    fallback_ticks: int
    observations_too_old: int
    safety_interventions: int
    fallback: str
    last_delay_steps: int
    last_trimmed_rows: int
    chunk_boundaries: int
    boundary_jump_mean: float
    boundary_jump_max: float
    action_step_mean: float
    prefix_deviation_mean: float
    prefix_deviation_max: float
    request_threshold_s: float
    replicas: tuple[str, ...]
    replica_moves: int
    last_move_reason: str
    replicas_skipped: tuple[str, ...]
    last_drop_reason: str
    request_rejections: int = 0
    last_rejection_reason: str = ""
    other_server_instance: str = ""
    task: str = ""
    goal_id: str = ""
    last_goal_id: str = ""
    last_goal_termination: str = ""
    standby_replica: str = ""
    hedges_sent: int = 0
    hedges_won: int = 0
    hedge_answers_dropped: int = 0
    hedge_deadline_ms: float = 0.0
    standby_promotions: int = 0
