"""The policy server's health, assembled once for every place that reports it.

Invariant: the ~/status heartbeat, GetStatus, /diagnostics and the HTTP
/healthz, /livez and /metrics endpoint all read the same ``ServerHealth`` snapshot,
so they never disagree; "rejected" as reported counts failed requests too.

Plain Python: the node converts the results to messages.
"""

from __future__ import annotations

import enum

from lerobot_ros.protocol.telemetry import ServerHealth, ServerStats
from lerobot_ros.server.observability.http_endpoint import HealthSnapshot, Metric
from lerobot_ros.server.sessions.capacity_gate import CapacityReport
from lerobot_ros.server.sessions.flood_guard import ClientRefusals

# Past this share of wall time in inference the worker is close to capacity.
BUSY_UTILIZATION = 0.8

# (metric name, help, type, ServerHealth field) for Prometheus.
SERVER_METRICS = (
    ("lerobot_ros_ready", "1 when the model is loaded and warmed up", "gauge", "ready"),
    ("lerobot_ros_draining", "1 while shutting down", "gauge", "draining"),
    ("lerobot_ros_active_sessions", "Open sessions", "gauge", "active_sessions"),
    ("lerobot_ros_max_sessions", "Session capacity", "gauge", "max_sessions"),
    (
        "lerobot_ros_standby_sessions",
        "Sessions held as warm standbys: failover places reserved (included in active_sessions)",
        "gauge",
        "standby_sessions",
    ),
    (
        "lerobot_ros_pending_requests",
        "Observations waiting for the inference worker",
        "gauge",
        "pending_requests",
    ),
    (
        "lerobot_ros_utilization",
        "Share of recent wall time spent in inference",
        "gauge",
        "utilization",
    ),
    (
        "lerobot_ros_requests_served_total",
        "Requests answered with a chunk",
        "counter",
        "requests_served",
    ),
    (
        "lerobot_ros_requests_rejected_total",
        "Requests rejected or failed",
        "counter",
        "requests_rejected",
    ),
    (
        "lerobot_ros_observations_superseded_total",
        "Observations replaced by a newer one",
        "counter",
        "observations_superseded",
    ),
    (
        "lerobot_ros_inference_ms_p50",
        "Median inference duration over a recent window (ms)",
        "gauge",
        "inference_ms_p50",
    ),
    (
        "lerobot_ros_inference_ms_p95",
        "95th percentile inference duration over a recent window (ms)",
        "gauge",
        "inference_ms_p95",
    ),
    (
        "lerobot_ros_max_batch_size",
        "Most requests one forward pass may take",
        "gauge",
        "max_batch_size",
    ),
    (
        "lerobot_ros_batch_size_mean",
        "Mean requests per forward pass over a recent window",
        "gauge",
        "batch_size_mean",
    ),
    ("lerobot_ros_forwards_total", "Forward passes run", "counter", "forwards"),
    (
        "lerobot_ros_headroom_robots",
        "More robots at the policy's rate that fit latency_budget_ms (-1: unknown)",
        "gauge",
        "headroom_robots",
    ),
    (
        "lerobot_ros_predicted_p95_ms",
        "p95 round trip the capacity model predicts for the open sessions (ms)",
        "gauge",
        "predicted_p95_ms",
    ),
    (
        "lerobot_ros_latency_budget_ms",
        "Admission latency budget (ms; 0: off)",
        "gauge",
        "latency_budget_ms",
    ),
    ("lerobot_ros_uptime_seconds", "Time since the server started", "gauge", "uptime_s"),
)


class DiagnosticLevel(enum.Enum):
    """Named as diagnostic_msgs/DiagnosticStatus names its levels."""

    OK = "ok"
    WARN = "warn"


def server_health(
    *,
    instance_id: str,
    server_namespace: str,
    heartbeat_seq: int,
    ready: bool,
    draining: bool,
    uptime_s: float,
    active_sessions: int,
    max_sessions: int,
    pending_requests: int,
    stats: ServerStats,
    max_batch_size: int = 1,
    refusals: list[ClientRefusals] | tuple[ClientRefusals, ...] = (),
    capacity: CapacityReport | None = None,
    standby_sessions: int = 0,
) -> ServerHealth:
    """The server's state and the worker's counters as one snapshot."""
    p50, p95 = stats.inference_percentiles_ms()
    capacity = capacity or CapacityReport(-1, 0.0, 0.0)
    return ServerHealth(
        instance_id=instance_id,
        server_namespace=server_namespace,
        heartbeat_seq=heartbeat_seq,
        ready=ready,
        draining=draining,
        uptime_s=uptime_s,
        active_sessions=active_sessions,
        max_sessions=max_sessions,
        standby_sessions=standby_sessions,
        pending_requests=pending_requests,
        utilization=stats.utilization(),
        requests_served=stats.requests_served,
        requests_rejected=stats.requests_rejected + stats.requests_failed,
        observations_superseded=stats.observations_superseded,
        inference_ms_p50=p50,
        inference_ms_p95=p95,
        max_batch_size=max_batch_size,
        batch_size_mean=stats.batch_size_mean(),
        forwards=stats.forwards,
        headroom_robots=capacity.headroom_robots,
        predicted_p95_ms=capacity.predicted_p95_ms,
        latency_budget_ms=capacity.latency_budget_ms,
        refused_client_ids=tuple(entry.client_id for entry in refusals),
        refused_on_arrival=tuple(entry.refused for entry in refusals),
        refused_last_reasons=tuple(entry.last_reason for entry in refusals),
        reopen_refused_for_s=tuple(entry.reopen_refused_for_s for entry in refusals),
    )


def diagnostic_summary(health: ServerHealth) -> tuple[DiagnosticLevel, str]:
    """The level and one-line message rqt_robot_monitor shows."""
    if health.draining:
        return DiagnosticLevel.WARN, "draining"
    if health.utilization > BUSY_UTILIZATION:
        return DiagnosticLevel.WARN, f"inference worker {health.utilization:.0%} busy"
    backing_off = [
        client
        for client, left in zip(
            health.refused_client_ids, health.reopen_refused_for_s, strict=False
        )
        if left > 0
    ]
    if backing_off:
        return (
            DiagnosticLevel.WARN,
            f"closed for flooding, reopen refused for now: {', '.join(backing_off)}",
        )
    standbys = getattr(health, "standby_sessions", 0)
    return DiagnosticLevel.OK, (
        f"serving {health.active_sessions}/{health.max_sessions} sessions"
        + (f" ({standbys} of them standbys)" if standbys else "")
    )


def health_snapshot(
    health: ServerHealth, policy_type: str, model_fingerprint: str
) -> HealthSnapshot:
    """What the HTTP endpoint serves: readiness for /healthz (liveness, /livez, is that any
    snapshot is made),
    SERVER_METRICS for /metrics."""
    return HealthSnapshot(
        ready=health.ready,
        draining=health.draining,
        detail={
            "instance_id": health.instance_id,
            "policy_type": policy_type,
            "model_fingerprint": model_fingerprint,
        },
        metrics=[
            Metric(name, help_text, kind, float(getattr(health, field)))
            for name, help_text, kind, field in SERVER_METRICS
        ],
    )
