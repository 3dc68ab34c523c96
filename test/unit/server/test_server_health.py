"""The server's health snapshot, diagnostics summary and metrics (no ROS)."""

import pytest

from lerobot_ros.protocol.telemetry import ServerHealth, ServerStats
from lerobot_ros.server.observability.health import (
    SERVER_METRICS,
    DiagnosticLevel,
    diagnostic_summary,
    health_snapshot,
    server_health,
)
from lerobot_ros.server.observability.http_endpoint import render_prometheus


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def health(stats=None, **overrides):
    fields = dict(
        instance_id="abc",
        server_namespace="/lerobot",
        heartbeat_seq=7,
        ready=True,
        draining=False,
        uptime_s=12.5,
        active_sessions=2,
        max_sessions=4,
        pending_requests=1,
        stats=stats or ServerStats(),
    )
    return server_health(**(fields | overrides))


def test_health_counts_failed_requests_as_rejected_and_reads_the_worker_window():
    stats = ServerStats(clock=Clock())
    for outcome, seconds in (
        ("ok", 0.010),
        ("ok", 0.030),
        ("rejected", 0.0),
        ("failed", 0.0),
        ("ok", 0.020),
    ):
        stats.record(outcome, seconds, superseded=1)
    snapshot = health(stats)
    assert (
        snapshot.requests_served,
        snapshot.requests_rejected,
        snapshot.observations_superseded,
    ) == (3, 2, 5)
    assert snapshot.inference_ms_p50 == pytest.approx(20.0, abs=1e-6)
    assert snapshot.utilization == pytest.approx(0.006)
    assert (
        snapshot.instance_id,
        snapshot.heartbeat_seq,
        snapshot.active_sessions,
        snapshot.pending_requests,
    ) == ("abc", 7, 2, 1)


def test_a_shared_forward_pass_is_busy_time_once_and_batch_sizes_are_reported():
    stats = ServerStats(clock=Clock())
    for size in (4, 2):
        stats.record_forward(size)
        for _ in range(size):  # each request of the pass reports the pass's 0.1 s
            stats.record("ok", 0.1, superseded=0, batch_size=size)
    snapshot = health(stats, max_batch_size=8)
    assert snapshot.utilization == pytest.approx(0.02)  # 0.2 s busy in the last 10 s, not 0.6 s
    assert snapshot.inference_ms_p50 == pytest.approx(100.0)  # what each robot's request took
    assert (snapshot.forwards, snapshot.batch_size_mean, snapshot.max_batch_size) == (2, 3.0, 8)
    metrics = {
        metric.name: metric.value for metric in health_snapshot(snapshot, "act", "f").metrics
    }
    assert (metrics["lerobot_ros_forwards_total"], metrics["lerobot_ros_batch_size_mean"]) == (
        2.0,
        3.0,
    )
    assert metrics["lerobot_ros_max_batch_size"] == 8.0


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, (DiagnosticLevel.OK, "serving 2/4 sessions")),
        ({"utilization": 0.85}, (DiagnosticLevel.WARN, "inference worker 85% busy")),
        ({"utilization": 0.85, "draining": True}, (DiagnosticLevel.WARN, "draining")),
    ],
)
def test_diagnostics_warn_when_draining_or_near_capacity(overrides, expected):
    base = ServerHealth(
        instance_id="abc",
        server_namespace="/lerobot",
        heartbeat_seq=1,
        ready=True,
        draining=False,
        uptime_s=1.0,
        active_sessions=2,
        max_sessions=4,
    )
    fields = {**base.__dict__, **overrides}
    assert diagnostic_summary(ServerHealth(**fields)) == expected


def test_standby_sessions_are_a_metric_and_named_in_the_diagnostics_summary():
    snapshot = health(active_sessions=3, standby_sessions=1)
    assert snapshot.standby_sessions == 1 and health().standby_sessions == 0
    assert diagnostic_summary(snapshot) == (
        DiagnosticLevel.OK,
        "serving 3/4 sessions (1 of them standbys)",
    )
    values = {
        metric.name: metric.value for metric in health_snapshot(snapshot, "act", "f").metrics
    }
    assert (values["lerobot_ros_standby_sessions"], values["lerobot_ros_active_sessions"]) == (
        1.0,
        3.0,
    )
    assert (
        "# TYPE lerobot_ros_standby_sessions gauge\nlerobot_ros_standby_sessions 1.0\n"
        in render_prometheus(health_snapshot(snapshot, "act", "f").metrics)
    )


def test_snapshot_serves_readiness_detail_and_every_server_metric():
    snapshot = health_snapshot(health(ready=False), "act", "f1ngerprint")
    assert snapshot.status == "not_ready"
    assert snapshot.detail == {
        "instance_id": "abc",
        "policy_type": "act",
        "model_fingerprint": "f1ngerprint",
    }
    values = {metric.name: metric.value for metric in snapshot.metrics}
    assert list(values) == [name for name, *_ in SERVER_METRICS]
    assert values["lerobot_ros_ready"] == 0.0 and values["lerobot_ros_active_sessions"] == 2.0
    assert values["lerobot_ros_uptime_seconds"] == 12.5
    text = render_prometheus(snapshot.metrics)
    assert (
        "# TYPE lerobot_ros_requests_served_total counter\nlerobot_ros_requests_served_total 0.0\n"
        in text
    )
    assert "lerobot_ros_max_sessions 4.0\n" in text
