"""Message conversions (no ROS graph needed: generated messages are plain classes)."""

import pytest

from lerobot_ros.protocol.contract import CameraSpec, ServerCapabilities
from lerobot_ros.protocol.telemetry import ServerHealth
from lerobot_ros.protocol.wire import control_plane


def full_capabilities() -> ServerCapabilities:
    return ServerCapabilities(
        model_id="user/act_so101",
        model_revision="v1.2",
        model_fingerprint="0123456789abcdef",
        policy_type="smolvla",
        serving_mode="shared",
        device="cuda:0",
        dtype="bfloat16",
        action_names=("a", "b"),
        state_names=("sa", "sb"),
        state_dim=2,
        cameras=(
            CameraSpec("observation.images.front", 480, 640),
            CameraSpec("observation.images.wrist", 240, 320),
        ),
        chunk_size=50,
        trained_fps=30.0,
        rtc_supported=True,
        rtc_enabled=True,
        rtc_execution_horizon=10,
        schema_version_min=1,
        schema_version_max=2,
        pinned_task="pick the cube",
    )


def test_capabilities_round_trip_every_field():
    original = full_capabilities()
    assert (
        control_plane.capabilities_from_msg(control_plane.capabilities_to_msg(original))
        == original
    )


def test_misaligned_camera_fields_are_refused():
    msg = control_plane.capabilities_to_msg(full_capabilities())
    msg.camera_heights = msg.camera_heights[:1]
    with pytest.raises(ValueError, match="2 names, 1 heights, 2 widths"):
        control_plane.capabilities_from_msg(msg)


@pytest.mark.parametrize("seconds", [0.0, 0.25, 1.5, 2.9999999999, 3600.000000001])
def test_duration_round_trip(seconds):
    duration = control_plane.duration_from_seconds(seconds)
    assert 0 <= duration.nanosec < 1_000_000_000
    assert control_plane.seconds_from_duration(duration) == pytest.approx(seconds, abs=1e-9)


def test_server_status_carries_health_and_capabilities():
    from builtin_interfaces.msg import Time

    health = ServerHealth(
        instance_id="abc123",
        server_namespace="/lerobot",
        heartbeat_seq=7,
        ready=True,
        draining=False,
        uptime_s=12.5,
        active_sessions=2,
        max_sessions=8,
        requests_served=40,
    )
    msg = control_plane.server_status_to_msg(
        health, control_plane.capabilities_to_msg(full_capabilities()), Time(sec=5)
    )
    assert (
        msg.instance_id,
        msg.heartbeat_seq,
        msg.ready,
        msg.active_sessions,
        msg.max_sessions,
    ) == ("abc123", 7, True, 2, 8)
    assert msg.requests_served == 40
    assert (msg.uptime.sec, msg.uptime.nanosec) == (12, 500_000_000)
    assert msg.header.stamp.sec == 5
    assert control_plane.capabilities_from_msg(msg.capabilities) == full_capabilities()


def test_a_heartbeat_reads_back_as_the_health_it_was_built_from():
    from builtin_interfaces.msg import Time

    health = ServerHealth(
        instance_id="abc123",
        server_namespace="/gpu0/lerobot",
        heartbeat_seq=7,
        ready=False,
        draining=True,
        uptime_s=12.5,
        active_sessions=3,
        max_sessions=8,
        standby_sessions=1,
        pending_requests=2,
        utilization=0.75,
        inference_ms_p95=31.5,
        headroom_robots=4,
        predicted_p95_ms=120.0,
        latency_budget_ms=250.0,
        refused_client_ids=("arm_9",),
        refused_on_arrival=(12,),
        refused_last_reasons=("bad mac",),
        reopen_refused_for_s=(1.5,),
    )
    msg = control_plane.server_status_to_msg(
        health, control_plane.capabilities_to_msg(full_capabilities()), Time(sec=5)
    )
    assert control_plane.server_health_from_msg(msg) == health


def test_open_request_round_trip():
    from lerobot_ros.protocol.contract import OpenRequest

    request = OpenRequest(
        "arm_1", 1, ("a", "b"), 2, ("observation.images.front",), 30.0, "pick", True
    )
    assert (
        control_plane.open_request_from_msg(control_plane.open_request_to_msg(request)) == request
    )
    standby = OpenRequest("arm_1", 4, ("a",), 1, (), 30.0, standby=True)
    msg = control_plane.open_request_to_msg(standby)
    assert msg.standby and not control_plane.open_request_to_msg(request).standby
    assert control_plane.open_request_from_msg(msg) == standby


def test_server_status_carries_the_standby_count_the_server_health_holds():
    from builtin_interfaces.msg import Time

    from lerobot_ros.protocol.telemetry import ServerStats
    from lerobot_ros.server.observability.health import server_health

    health = server_health(
        instance_id="abc",
        server_namespace="/lerobot",
        heartbeat_seq=1,
        ready=True,
        draining=False,
        uptime_s=1.0,
        active_sessions=3,
        max_sessions=8,
        pending_requests=0,
        stats=ServerStats(),
        standby_sessions=2,
    )
    msg = control_plane.server_status_to_msg(
        health, control_plane.capabilities_to_msg(full_capabilities()), Time()
    )
    assert (msg.active_sessions, msg.standby_sessions) == (3, 2)
    assert control_plane.health_values(health)["standby_sessions"] == 2


def test_server_stats_count_outcomes_and_window_inference_times():
    from lerobot_ros.protocol.telemetry import ServerStats

    now = [100.0]
    stats = ServerStats(window=100, clock=lambda: now[0])
    for ms in range(1, 101):
        stats.record("ok", ms / 1000, superseded=1)
    stats.record("rejected", 0.0, 0)
    stats.record("failed", 0.0, 0)
    p50, p95 = stats.inference_percentiles_ms()
    assert p50 == pytest.approx(50.5) and p95 == pytest.approx(95.05)
    assert (stats.requests_served, stats.requests_rejected, stats.requests_failed) == (100, 1, 1)
    assert stats.observations_superseded == 100
    # 5.05 s busy in the last 10 s
    assert stats.utilization(horizon_s=10.0) == pytest.approx(0.505)
    now[0] += 60.0
    assert stats.utilization(horizon_s=10.0) == 0.0
