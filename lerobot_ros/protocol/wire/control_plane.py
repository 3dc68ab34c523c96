"""The control plane (services, status topics, diagnostics) <-> plain Python values.

Nodes call these functions instead of filling message fields themselves, so
field-by-field knowledge of the interfaces lives here and is unit-tested here.
Byte and float arrays are assigned as ``bytes``/``array.array`` (rclpy
iterates numpy arrays element by element, orders of magnitude slower).
"""

from __future__ import annotations

import array
import dataclasses

from builtin_interfaces.msg import Duration
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

from lerobot_ros.msg import ExecutorStatus, ServerStatus
from lerobot_ros.msg import ServerCapabilities as ServerCapabilitiesMsg
from lerobot_ros.protocol.contract import CameraSpec, OpenRequest, ServerCapabilities
from lerobot_ros.protocol.telemetry import ExecutorTelemetry, ServerHealth
from lerobot_ros.srv import OpenSession

# Fields that have the same name and meaning in ServerCapabilities (the
# dataclass) and the message; the rest are converted explicitly below.
_CAPABILITY_FIELDS = (
    "model_id",
    "model_revision",
    "model_fingerprint",
    "policy_type",
    "serving_mode",
    "device",
    "dtype",
    "state_dim",
    "chunk_size",
    "trained_fps",
    "rtc_supported",
    "rtc_enabled",
    "rtc_execution_horizon",
    "schema_version_min",
    "schema_version_max",
    "pinned_task",
)


def capabilities_to_msg(capabilities: ServerCapabilities) -> ServerCapabilitiesMsg:
    msg = ServerCapabilitiesMsg()
    for name in _CAPABILITY_FIELDS:
        setattr(msg, name, getattr(capabilities, name))
    msg.trained_fps = float(capabilities.trained_fps)
    msg.action_names = list(capabilities.action_names)
    msg.state_names = list(capabilities.state_names)
    msg.camera_names = [camera.name for camera in capabilities.cameras]
    msg.camera_heights = array.array("I", [camera.height for camera in capabilities.cameras])
    msg.camera_widths = array.array("I", [camera.width for camera in capabilities.cameras])
    return msg


def capabilities_from_msg(msg: ServerCapabilitiesMsg) -> ServerCapabilities:
    if not len(msg.camera_names) == len(msg.camera_heights) == len(msg.camera_widths):
        raise ValueError(
            "ServerCapabilities camera fields are not index-aligned: "
            f"{len(msg.camera_names)} names, {len(msg.camera_heights)} heights, "
            f"{len(msg.camera_widths)} widths"
        )
    return ServerCapabilities(
        **{name: getattr(msg, name) for name in _CAPABILITY_FIELDS},
        action_names=tuple(msg.action_names),
        state_names=tuple(msg.state_names),
        cameras=tuple(
            CameraSpec(name, int(height), int(width))
            for name, height, width in zip(
                msg.camera_names, msg.camera_heights, msg.camera_widths, strict=False
            )
        ),
    )


def duration_from_seconds(seconds: float) -> Duration:
    sec, nanosec = divmod(round(seconds * 1e9), 1_000_000_000)
    return Duration(sec=sec, nanosec=nanosec)


def seconds_from_duration(duration: Duration) -> float:
    return duration.sec + duration.nanosec * 1e-9


def server_status_to_msg(
    health: ServerHealth, capabilities: ServerCapabilitiesMsg, stamp
) -> ServerStatus:
    """Build a heartbeat; ``stamp`` is the server's own clock, for plotting only."""
    msg = ServerStatus(capabilities=capabilities)
    msg.header.stamp = stamp
    for field in dataclasses.fields(health):
        if field.name != "uptime_s":  # every other field has its name in the message
            value = getattr(health, field.name)
            setattr(msg, field.name, list(value) if isinstance(value, tuple) else value)
    msg.uptime = duration_from_seconds(health.uptime_s)
    return msg


def server_health_from_msg(msg: ServerStatus) -> ServerHealth:
    """A heartbeat as a robot reads it: the record ``server_status_to_msg`` was built from."""
    values = {}
    for field in dataclasses.fields(ServerHealth):
        if field.name != "uptime_s":
            value = getattr(msg, field.name)
            values[field.name] = tuple(value) if isinstance(value, (list, array.array)) else value
    return ServerHealth(uptime_s=seconds_from_duration(msg.uptime), **values)


def diagnostic_status(
    name: str, hardware_id: str, level: bytes, message: str, values: dict
) -> DiagnosticStatus:
    """One rqt_robot_monitor entry; values are shown as key/value strings."""
    return DiagnosticStatus(
        level=level,
        name=name,
        hardware_id=hardware_id,
        message=message,
        values=[KeyValue(key=key, value=_diagnostic_text(value)) for key, value in values.items()],
    )


def server_diagnostics(
    health: ServerHealth,
    name: str,
    policy_type: str,
    fingerprint: str,
    level_name: str,
    message: str,
    stamp,
) -> DiagnosticArray:
    """The policy server's /diagnostics array: one entry, the health's values and the policy
    type."""
    status = diagnostic_status(
        name,
        fingerprint,
        getattr(DiagnosticStatus, level_name),
        message,
        health_values(health) | {"policy_type": policy_type},
    )
    array = DiagnosticArray(status=[status])
    array.header.stamp = stamp
    return array


def _diagnostic_text(value) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


_PER_CLIENT = (
    "refused_client_ids",
    "refused_on_arrival",
    "refused_last_reasons",
    "reopen_refused_for_s",
)


def health_values(health: ServerHealth) -> dict:
    """Key/values for /diagnostics: the scalars, then one entry per client with refusals."""
    values = {
        key: value for key, value in dataclasses.asdict(health).items() if key not in _PER_CLIENT
    }
    for client, count, reason, backoff in zip(
        *(getattr(health, name) for name in _PER_CLIENT), strict=False
    ):
        values[f"refused_on_arrival/{client}"] = f"{count} (last: {reason})" + (
            f"; reopen refused for {backoff:.1f} s" if backoff > 0 else ""
        )
    return values


def executor_status_to_msg(telemetry: ExecutorTelemetry, stamp) -> ExecutorStatus:
    """Build an ExecutorStatus; ``stamp`` is the executor's own clock, for plotting only."""
    msg = ExecutorStatus()
    msg.header.stamp = stamp
    for field in dataclasses.fields(telemetry):  # every field has its name in the message
        setattr(msg, field.name, getattr(telemetry, field.name))
    return msg


# Diagnostic level of each executor state (ExecutorStatus.STATE_* order).
_EXECUTOR_LEVELS = {
    "CONNECTING": DiagnosticStatus.WARN,
    "STREAMING": DiagnosticStatus.OK,
    "DEGRADED": DiagnosticStatus.WARN,
    "STALLED": DiagnosticStatus.WARN,
    "RECONNECTING": DiagnosticStatus.WARN,
    "OFFLINE": DiagnosticStatus.ERROR,  # holding, not moving the robot: an operator must look
    "DEAD": DiagnosticStatus.ERROR,
}


def executor_diagnostic(name: str, telemetry: ExecutorTelemetry) -> DiagnosticStatus:
    """One rqt_robot_monitor entry for an executor: OK while streaming, ERROR once OFFLINE or
    DEAD."""
    level = _EXECUTOR_LEVELS.get(telemetry.state_name, DiagnosticStatus.STALE)
    message = telemetry.state_name + (" (paused)" if telemetry.paused else "")
    if telemetry.reason and telemetry.state_name != "STREAMING":
        message += f": {telemetry.reason}"
    return diagnostic_status(
        name, telemetry.client_id, level, message, dataclasses.asdict(telemetry)
    )


def open_request_to_msg(request: OpenRequest) -> OpenSession.Request:
    fields = dataclasses.asdict(request)
    fields["action_names"], fields["camera_names"] = (
        list(request.action_names),
        list(request.camera_names),
    )
    return OpenSession.Request(**fields)


def open_request_from_msg(msg: OpenSession.Request) -> OpenRequest:
    return OpenRequest(
        **{field.name: getattr(msg, field.name) for field in dataclasses.fields(OpenRequest)}
        | {"action_names": tuple(msg.action_names), "camera_names": tuple(msg.camera_names)}
    )
