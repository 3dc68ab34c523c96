"""The one place that converts between lerobot_ros messages and plain Python.

Nodes call these functions instead of filling message fields themselves, so
field-by-field knowledge of the interfaces lives here and is unit-tested here.
Byte and float arrays are assigned as ``bytes``/``array.array`` (rclpy
iterates numpy arrays element by element, ~1000x slower).
"""

from __future__ import annotations

import array

from builtin_interfaces.msg import Duration

from lerobot_ros.contract import CameraSpec, ServerCapabilities
from lerobot_ros.msg import ServerCapabilities as ServerCapabilitiesMsg
from lerobot_ros.msg import ServerStatus
from lerobot_ros.telemetry import ServerHealth


def capabilities_to_msg(capabilities: ServerCapabilities) -> ServerCapabilitiesMsg:
    msg = ServerCapabilitiesMsg()
    msg.model_id = capabilities.model_id
    msg.model_revision = capabilities.model_revision
    msg.model_fingerprint = capabilities.model_fingerprint
    msg.policy_type = capabilities.policy_type
    msg.serving_mode = capabilities.serving_mode
    msg.device = capabilities.device
    msg.dtype = capabilities.dtype
    msg.action_names = list(capabilities.action_names)
    msg.state_names = list(capabilities.state_names)
    msg.state_dim = capabilities.state_dim
    msg.camera_names = [camera.name for camera in capabilities.cameras]
    msg.camera_heights = array.array("I", [camera.height for camera in capabilities.cameras])
    msg.camera_widths = array.array("I", [camera.width for camera in capabilities.cameras])
    msg.chunk_size = capabilities.chunk_size
    msg.trained_fps = float(capabilities.trained_fps)
    msg.rtc_supported = capabilities.rtc_supported
    msg.rtc_enabled = capabilities.rtc_enabled
    msg.rtc_execution_horizon = capabilities.rtc_execution_horizon
    msg.schema_version_min = capabilities.schema_version_min
    msg.schema_version_max = capabilities.schema_version_max
    msg.pinned_task = capabilities.pinned_task
    return msg


def capabilities_from_msg(msg: ServerCapabilitiesMsg) -> ServerCapabilities:
    if not len(msg.camera_names) == len(msg.camera_heights) == len(msg.camera_widths):
        raise ValueError(
            "ServerCapabilities camera fields are not index-aligned: "
            f"{len(msg.camera_names)} names, {len(msg.camera_heights)} heights, {len(msg.camera_widths)} widths"
        )
    return ServerCapabilities(
        model_id=msg.model_id,
        model_revision=msg.model_revision,
        model_fingerprint=msg.model_fingerprint,
        policy_type=msg.policy_type,
        serving_mode=msg.serving_mode,
        device=msg.device,
        dtype=msg.dtype,
        action_names=tuple(msg.action_names),
        state_names=tuple(msg.state_names),
        state_dim=msg.state_dim,
        cameras=tuple(
            CameraSpec(name, int(height), int(width))
            for name, height, width in zip(msg.camera_names, msg.camera_heights, msg.camera_widths)
        ),
        chunk_size=msg.chunk_size,
        trained_fps=float(msg.trained_fps),
        rtc_supported=msg.rtc_supported,
        rtc_enabled=msg.rtc_enabled,
        rtc_execution_horizon=msg.rtc_execution_horizon,
        schema_version_min=msg.schema_version_min,
        schema_version_max=msg.schema_version_max,
        pinned_task=msg.pinned_task,
    )


def duration_from_seconds(seconds: float) -> Duration:
    sec, nanosec = divmod(round(seconds * 1e9), 1_000_000_000)
    return Duration(sec=sec, nanosec=nanosec)


def seconds_from_duration(duration: Duration) -> float:
    return duration.sec + duration.nanosec * 1e-9


def server_status_to_msg(health: ServerHealth, capabilities: ServerCapabilitiesMsg, stamp) -> ServerStatus:
    """Build a heartbeat; ``stamp`` is the server's own clock, for plotting only."""
    msg = ServerStatus()
    msg.header.stamp = stamp
    msg.instance_id = health.instance_id
    msg.server_namespace = health.server_namespace
    msg.heartbeat_seq = health.heartbeat_seq
    msg.capabilities = capabilities
    msg.ready = health.ready
    msg.draining = health.draining
    msg.active_sessions = health.active_sessions
    msg.max_sessions = health.max_sessions
    msg.pending_requests = health.pending_requests
    msg.utilization = float(health.utilization)
    msg.requests_served = health.requests_served
    msg.requests_rejected = health.requests_rejected
    msg.observations_superseded = health.observations_superseded
    msg.inference_ms_p50 = float(health.inference_ms_p50)
    msg.inference_ms_p95 = float(health.inference_ms_p95)
    msg.uptime = duration_from_seconds(health.uptime_s)
    return msg
