"""chunk_executor_node's parameters: the table, their validation, the settings they make.

Invariant: the node does nothing (no handshake, no subscription, no command)
until every parameter is valid, and an operator with a broken configuration
sees every problem at once, each saying what was expected and what arrived.
Plain Python (no rclpy): the node wraps ``PARAMETER_TABLE`` into
``node_support.ParameterSpec`` entries; ``config/robot.yaml`` and the README
list the same names and defaults (a test checks both).
"""

from __future__ import annotations

import math
import socket
from dataclasses import dataclass

from lerobot_ros.executor.state_machine import FALLBACK_MODES, FailSafeConfig
from lerobot_ros.contract import client_id_problem, sanitize_client_id
from lerobot_ros.output_modes import DEFAULT_OUTPUT_TOPICS, OUTPUT_MODES

CAMERA_TRANSPORTS = ("raw", "compressed")

#: Float-list parameters: ROS 2 cannot infer the type of [], so the node declares them typed.
FLOAT_LIST_PARAMETERS = ("joint_lower_limits", "joint_upper_limits")

# (name, default, description). String lists default to [""] ("not set"), the
# convention of node_support.declared_strings.
PARAMETER_TABLE = (
    ("server_namespace", "/lerobot", "Namespace of the policy server's services, e.g. /lerobot"),
    ("client_id", "", "Stable id of this robot at the server; empty: generated from the host name and node namespace"),
    ("task", "", "Task sent with every observation (language-conditioned policies); empty: the server's default"),
    ("fps", 30.0, "Control rate: actions executed (and commands published) per second"),
    ("joint_names", [""], "Ordered joint (= action) names of this robot; must equal the policy's"),
    ("camera_names", [""], "Camera feature names the policy expects, e.g. observation.images.front"),
    ("camera_topics", [""], "Image topic of each camera, index-aligned with camera_names"),
    ("camera_transports", [""], "Per camera: raw (sensor_msgs/Image) or compressed (CompressedImage); empty: all raw"),
    ("state_topic", "joint_states", "sensor_msgs/JointState topic the robot state is read from (mapped by joint name)"),
    ("state_include_velocity", False, "Append the joint velocities to the state vector (state = positions + velocities)"),
    ("output_mode", "forward_command", "forward_command (Float64MultiArray), joint_trajectory (JointTrajectory) or joint_state (JointState)"),
    ("output_topic", "", "Topic commands are published on; empty: the output mode's default"),
    ("jpeg_quality", 90, "JPEG quality for raw camera frames (1-100); 0: send raw rgb8. JPEG inputs are forwarded as is"),
    ("buffer_time_s", 0.5, "Request the next chunk when the queued actions cover at most this long (seconds)"),
    ("request_timeout_s", 1.0, "Give up waiting for the chunk answering a request after this long (seconds)"),
    ("degraded_after_s", 2.5, "No chunk merged for this long while actions remain: DEGRADED (seconds)"),
    ("max_action_age_s", 3.0, "Never execute an action whose source observation is older than this (seconds)"),
    ("max_offline_s", 30.0, "Offline (no chunk, no accepted handshake) longer than this: DEAD (seconds)"),
    ("reconnect_backoff_initial_s", 0.5, "First wait before re-handshaking after the server was lost (seconds)"),
    ("reconnect_backoff_max_s", 5.0, "Cap of the doubling wait between re-handshake attempts (seconds)"),
    ("heartbeat_timeout_s", 2.0, "Server heartbeat (<server_namespace>/status) silent this long: RECONNECTING (seconds)"),
    ("fallback", "hold", "Published instead of policy actions when none is fresh: hold, repeat_last or zero"),
    ("joint_lower_limits", [], "Per-joint lower position limits, in joint order; empty: none"),
    ("joint_upper_limits", [], "Per-joint upper position limits, in joint order; empty: none"),
    ("max_step_per_tick", 0.0, "Largest change of any joint command per control tick; 0: no limit"),
    ("reject_non_finite", True, "Replace a non-finite action by holding the reference position"),
    ("max_observation_age_s", 0.5, "Do not send an observation whose joint state or camera frame is older (seconds)"),
    ("handshake_timeout_s", 30.0, "How long to wait for the server to answer at start-up (seconds)"),
    ("rtc_requested", True, "Ask for real-time chunking (used only when the server's policy supports it)"),
    ("status_period_s", 0.2, "Period of ~/status (ExecutorStatus) and /diagnostics (seconds)"),
    ("handshake_only", False, "Only check this robot against the server (get_status), print the outcome and exit"),
)


def _strings(values) -> tuple[str, ...]:
    return tuple(value for value in values if value)


@dataclass(frozen=True)
class ExecutorSettings:
    """Validated parameters, in the types the executor uses."""

    server_namespace: str
    client_id: str
    task: str
    fps: float
    joint_names: tuple[str, ...]
    camera_names: tuple[str, ...]
    camera_topics: tuple[str, ...]
    camera_transports: tuple[str, ...]
    state_topic: str
    state_include_velocity: bool
    output_mode: str
    output_topic: str
    jpeg_quality: int
    buffer_time_s: float
    request_timeout_s: float
    max_observation_age_s: float
    handshake_timeout_s: float
    rtc_requested: bool
    status_period_s: float
    fallback: str
    joint_lower_limits: tuple[float, ...]
    joint_upper_limits: tuple[float, ...]
    max_step_per_tick: float
    reject_non_finite: bool
    failsafe: FailSafeConfig
    handshake_only: bool = False

    @property
    def state_dim(self) -> int:
        return len(self.joint_names) * (2 if self.state_include_velocity else 1)

    def service(self, name: str) -> str:
        return self.server_namespace.rstrip("/") + "/" + name


def default_client_id(hostname: str, node_namespace: str) -> str:
    """A stable client id for this robot: host name plus the node's namespace."""
    return sanitize_client_id(f"{hostname}_{node_namespace.strip('/')}")


def _positive(params: dict, name: str, problems: list[str]) -> None:
    value = params[name]
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        problems.append(f"'{name}' is {value!r}, expected a finite number more than 0")


def parameter_problems(params: dict) -> list[str]:
    """Everything wrong with the parameters, checked before the node does anything."""
    problems: list[str] = []
    joints = _strings(params["joint_names"])
    if not joints:
        problems.append("'joint_names' is empty: list the robot's ordered joint names")
    elif len(set(joints)) != len(joints):
        problems.append(f"'joint_names' {list(joints)} names a joint twice")
    if params["handshake_only"]:
        _positive(params, "handshake_timeout_s", problems)
        return problems
    if params["client_id"]:
        problem = client_id_problem(params["client_id"])
        if problem:
            problems.append(f"'client_id': {problem}")
    if not params["server_namespace"].startswith("/"):
        problems.append(f"'server_namespace' is {params['server_namespace']!r}, expected an absolute name like /lerobot")
    for name in ("fps", "buffer_time_s", "request_timeout_s", "max_observation_age_s", "handshake_timeout_s",
                 "status_period_s", "degraded_after_s", "max_action_age_s", "max_offline_s",
                 "reconnect_backoff_initial_s", "reconnect_backoff_max_s", "heartbeat_timeout_s"):
        _positive(params, name, problems)
    if (
        not problems
        and params["reconnect_backoff_initial_s"] > params["reconnect_backoff_max_s"]
    ):
        problems.append(
            f"'reconnect_backoff_initial_s' {params['reconnect_backoff_initial_s']} is more than "
            f"'reconnect_backoff_max_s' {params['reconnect_backoff_max_s']}"
        )
    cameras = _strings(params["camera_names"])
    topics = _strings(params["camera_topics"])
    transports = _strings(params["camera_transports"])
    if len(set(cameras)) != len(cameras):
        problems.append(f"'camera_names' {list(cameras)} names a camera twice")
    if len(topics) != len(cameras):
        problems.append(
            f"'camera_topics' holds {len(topics)} topics for {len(cameras)} cameras {list(cameras)}; "
            "give one topic per camera, index-aligned"
        )
    if transports and len(transports) != len(cameras):
        problems.append(
            f"'camera_transports' holds {len(transports)} entries for {len(cameras)} cameras; "
            "give one per camera (raw or compressed), or none for all raw"
        )
    bad_transports = [value for value in transports if value not in CAMERA_TRANSPORTS]
    if bad_transports:
        problems.append(f"'camera_transports' has {bad_transports}, expected each to be one of {list(CAMERA_TRANSPORTS)}")
    if not params["state_topic"]:
        problems.append("'state_topic' is empty: name the sensor_msgs/JointState topic")
    if params["output_mode"] not in OUTPUT_MODES:
        problems.append(f"'output_mode' is {params['output_mode']!r}, expected one of {list(OUTPUT_MODES)}")
    if params["fallback"] not in FALLBACK_MODES:
        problems.append(f"'fallback' is {params['fallback']!r}, expected one of {list(FALLBACK_MODES)}")
    quality = params["jpeg_quality"]
    if isinstance(quality, bool) or not isinstance(quality, int) or not 0 <= quality <= 100:
        problems.append(f"'jpeg_quality' is {quality!r}, expected 0 (raw) or 1..100")
    for name in FLOAT_LIST_PARAMETERS:
        values = list(params[name])
        if values and joints and len(values) != len(joints):
            problems.append(f"'{name}' holds {len(values)} values, expected none or {len(joints)} (one per joint)")
        if any(math.isnan(value) for value in values):
            problems.append(f"'{name}' contains NaN; use .inf / -.inf for 'no limit' on one joint")
    lower, upper = list(params["joint_lower_limits"]), list(params["joint_upper_limits"])
    if lower and upper and len(lower) == len(upper):
        crossed = [joints[i] if i < len(joints) else str(i) for i, (lo, hi) in enumerate(zip(lower, upper)) if lo > hi]
        if crossed:
            problems.append(f"'joint_lower_limits' is above 'joint_upper_limits' for {crossed}")
    step = params["max_step_per_tick"]
    if not (isinstance(step, (int, float)) and not math.isnan(step) and step >= 0):
        problems.append(f"'max_step_per_tick' is {step!r}, expected 0 (no limit) or more")
    return problems


def settings_from_params(params: dict, node_namespace: str = "/", hostname: str | None = None) -> ExecutorSettings:
    """Build the settings; call only when ``parameter_problems(params)`` is empty."""
    cameras = _strings(params["camera_names"])
    transports = _strings(params["camera_transports"]) or ("raw",) * len(cameras)
    mode = params["output_mode"]
    handshake_only = bool(params["handshake_only"])
    failsafe = FailSafeConfig(
        degraded_after_s=params["degraded_after_s"],
        max_action_age_s=params["max_action_age_s"],
        max_offline_s=params["max_offline_s"],
        heartbeat_timeout_s=params["heartbeat_timeout_s"],
        reconnect_backoff_initial_s=params["reconnect_backoff_initial_s"],
        reconnect_backoff_max_s=params["reconnect_backoff_max_s"],
    ) if not handshake_only else None
    return ExecutorSettings(
        server_namespace=params["server_namespace"],
        client_id=params["client_id"] or default_client_id(hostname or socket.gethostname(), node_namespace),
        task=params["task"],
        fps=float(params["fps"]),
        joint_names=_strings(params["joint_names"]),
        camera_names=cameras,
        camera_topics=_strings(params["camera_topics"]),
        camera_transports=transports,
        state_topic=params["state_topic"],
        state_include_velocity=bool(params["state_include_velocity"]),
        output_mode=mode,
        output_topic=params["output_topic"] or DEFAULT_OUTPUT_TOPICS.get(mode, ""),
        jpeg_quality=int(params["jpeg_quality"]),
        buffer_time_s=float(params["buffer_time_s"]),
        request_timeout_s=float(params["request_timeout_s"]),
        max_observation_age_s=float(params["max_observation_age_s"]),
        handshake_timeout_s=float(params["handshake_timeout_s"]),
        rtc_requested=bool(params["rtc_requested"]),
        status_period_s=float(params["status_period_s"]),
        fallback=params["fallback"],
        joint_lower_limits=tuple(params["joint_lower_limits"]),
        joint_upper_limits=tuple(params["joint_upper_limits"]),
        max_step_per_tick=float(params["max_step_per_tick"]),
        reject_non_finite=bool(params["reject_non_finite"]),
        failsafe=failsafe,
        handshake_only=handshake_only,
    )


def timing_warnings(settings: ExecutorSettings, chunk_size: int, replace_mode: bool = False) -> list[str]:
    """Settings that work against a policy's chunk length (known after the handshake).

    In append mode the last row of a chunk is executed ``buffer_time_s +
    chunk_size / fps`` after its observation was taken, and chunks arrive
    every ``chunk_size / fps`` (each one is played whole). In replace mode the
    queue is refilled once it drains to the buffer: every
    ``chunk_size / fps - buffer_time_s``.
    """
    warnings = []
    chunk_s = chunk_size / settings.fps
    period_s = chunk_s - settings.buffer_time_s if replace_mode else chunk_s
    if settings.buffer_time_s + chunk_s > settings.failsafe.max_action_age_s:
        warnings.append(
            f"max_action_age_s {settings.failsafe.max_action_age_s} is below buffer_time_s + chunk duration "
            f"({settings.buffer_time_s} + {chunk_s:.3f} s): the tail of every chunk will be dropped as stale"
        )
    if period_s >= settings.failsafe.degraded_after_s:
        warnings.append(
            f"degraded_after_s {settings.failsafe.degraded_after_s} is below the chunk period "
            f"({period_s:.3f} s in {'replace' if replace_mode else 'append'} mode): "
            "the executor will report DEGRADED while streaming"
        )
    return warnings
