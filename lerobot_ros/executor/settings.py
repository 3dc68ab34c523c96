"""chunk_executor_node's parameters: the table, its rules, the settings they make.

Invariant: the node does nothing (no handshake, no subscription, no command) until every parameter
is valid, and an operator with a broken configuration sees every problem at once, each saying what
was expected and what arrived. Each parameter is written once, in ``PARAMETERS``;
``ExecutorSettings`` is derived from it, and ``config/robot.yaml`` and
docs/reference/nodes/chunk_executor_node.md list the same names and defaults (a test checks both).
``runtime`` entries (the safety limits and the fallback) are settable while streaming
(``executor/runtime_parameters.py``). Plain Python (no rclpy).
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import replace
from functools import cached_property

from lerobot_ros.executor.control.failsafe_config import (
    FALLBACK_MODES,
    FailSafeConfig,
    backoff_problem,
)
from lerobot_ros.executor.control.joint_mapping import JointMapping, mapping_problem
from lerobot_ros.executor.fleet.discovery import FleetSpec, fleet_problem, fleet_spec
from lerobot_ros.node_shell.parameters import (
    BOOL,
    FLOAT,
    FLOAT_LIST,
    INTEGER,
    STRING,
    STRING_LIST,
    Parameter,
    absolute_name,
    at_least,
    distinct,
    each_one_of,
    in_range,
    no_nan,
    one_of,
    optional,
    positive,
    required,
    settings_dataclass,
    table_problems,
)
from lerobot_ros.protocol.contract import client_id_problem, sanitize_client_id
from lerobot_ros.protocol.wire.images import CAMERA_TRANSPORTS
from lerobot_ros.protocol.wire.output_modes import DEFAULT_OUTPUT_MODE, OUTPUT_MODES, choices_text


def _client_id(name: str, value: str) -> str | None:
    problem = client_id_problem(value)
    return f"'{name}': {problem}" if problem else None


_LIMIT_CHECKS = (no_nan("use .inf / -.inf for 'no limit' on one joint"),)

PARAMETERS = (
    Parameter(
        "server_namespace",
        STRING,
        "/lerobot",
        "Namespace of the policy server's services, e.g. /lerobot",
        (absolute_name("/lerobot"),),
    ),
    Parameter(
        "server_namespaces",
        STRING_LIST,
        [""],
        "Ordered replica namespaces serving the same model (a fleet, e.g. [/gpu0, /gpu1]); "
        "[auto]: every "
        "server found on the ROS graph, [auto:/prefix]: those under /prefix, found while running; "
        "empty: server_namespace alone. When set, server_namespace is not used",
        (fleet_problem, distinct("server namespace")),
    ),
    Parameter(
        "replica_status_timeout_s",
        FLOAT,
        1.0,
        "Bound of a placement's get_status round, all replicas asked at once (seconds); at "
        "start-up "
        "they are asked again until handshake_timeout_s",
        (positive(),),
    ),
    Parameter(
        "discovery_period_s",
        FLOAT,
        1.0,
        "With server_namespaces [auto]: how often the ROS graph is read for servers joining or "
        "leaving the fleet (seconds)",
        (positive(),),
    ),
    Parameter(
        "standby_session",
        BOOL,
        True,
        "In a fleet: keep a warm standby session on a second ready replica of the same model, "
        "hedge a "
        "late request there and move there at once when the serving replica is lost (zero-gap "
        "failover)",
    ),
    Parameter(
        "hedge_deadline_factor",
        FLOAT,
        2.0,
        "With a standby: a request not answered within this x the p95 round trip (of the latest "
        "50) is "
        "sent to the standby too, and the first valid answer is merged",
        (positive(),),
    ),
    Parameter(
        "hedge_min_deadline_s",
        FLOAT,
        0.1,
        "Lower bound of the hedge deadline (seconds): a fast round trip's jitter alone never "
        "hedges",
        (positive(),),
    ),
    Parameter(
        "graph_watch_period_s",
        FLOAT,
        0.2,
        "In a fleet: how often the serving and standby replicas' heartbeat publishers are looked "
        "for on "
        "the ROS graph; one gone is a lost replica, without waiting for heartbeat_timeout_s "
        "(seconds)",
        (positive(),),
    ),
    Parameter(
        "rebalance_period_s",
        FLOAT,
        5.0,
        "In a fleet: how often (on average; each robot at its own random phase) the replicas' "
        "load is "
        "looked at, and the robot moves between chunks to one much less loaded (seconds); "
        "0: never",
        (at_least(0.0),),
    ),
    Parameter(
        "rebalance_cooldown_s",
        FLOAT,
        10.0,
        "In a fleet: no rebalancing move within this long of a session opening (a placement, a "
        "move, a "
        "failover) or of a failed move (seconds)",
        (at_least(0.0),),
    ),
    Parameter(
        "rebalance_hysteresis",
        FLOAT,
        0.0,
        "In a fleet: a move must leave the replica it leaves busier than the target by at least "
        "this "
        "much, in fractions of a replica's capacity (robots, when capacities are unknown); 0 "
        "already "
        "never moves a robot back and forth between equal replicas",
        (at_least(0.0),),
    ),
    # empty: generated from the host name
    Parameter(
        "client_id",
        STRING,
        "",
        "Stable id of this robot at the server; empty: generated from the host name and node "
        "namespace",
        (optional(_client_id),),
    ),
    Parameter(
        "task",
        STRING,
        "",
        "Task sent with every observation (language-conditioned policies); empty: the server's "
        "default",
    ),
    Parameter(
        "fps",
        FLOAT,
        30.0,
        "Policy rate: actions executed per second (the rate the policy was trained at)",
        (positive(),),
    ),
    Parameter(
        "control_rate_hz",
        FLOAT,
        0.0,
        "Commands published per second, interpolated linearly between consecutive actions; 0: fps",
        (at_least(0, "0 (= fps) or a rate >= fps"),),
    ),
    Parameter(
        "joint_names",
        STRING_LIST,
        [""],
        "Ordered joint (= action) names of this robot; must equal the policy's",
        (required("list the robot's ordered joint names"), distinct("joint")),
    ),
    Parameter(
        "policy_joint_names",
        STRING_LIST,
        [""],
        "The policy's action name of each joint, index-aligned with joint_names; empty: the same "
        "names",
    ),
    Parameter(
        "joint_scale",
        FLOAT_LIST,
        [],
        "Per joint: policy units per robot unit (e.g. 57.29578 for degrees from radians); "
        "empty: 1",
    ),
    Parameter(
        "joint_offset",
        FLOAT_LIST,
        [],
        "Per joint: added after the scale (policy = robot x joint_scale + joint_offset); empty: 0",
    ),
    Parameter(
        "camera_names",
        STRING_LIST,
        [""],
        "Camera feature names the policy expects, e.g. observation.images.front",
        (distinct("camera"),),
    ),
    Parameter(
        "camera_topics",
        STRING_LIST,
        [""],
        "Image topic of each camera, index-aligned with camera_names",
    ),
    Parameter(
        "camera_transports",
        STRING_LIST,
        [""],
        "Per camera: raw (sensor_msgs/Image) or compressed (CompressedImage); empty: all raw",
        (each_one_of(CAMERA_TRANSPORTS),),
    ),
    Parameter(
        "state_topic",
        STRING,
        "joint_states",
        "sensor_msgs/JointState topic the robot state is read from (mapped by joint name)",
        (required("name the sensor_msgs/JointState topic"),),
    ),
    Parameter(
        "state_include_velocity",
        BOOL,
        False,
        "Append the joint velocities to the state vector (state = positions + velocities)",
    ),
    Parameter("output_mode", STRING, DEFAULT_OUTPUT_MODE, choices_text(), (one_of(OUTPUT_MODES),)),
    Parameter(
        "output_topic",
        STRING,
        "",
        "Topic commands are published on; empty: the output mode's default",
    ),
    Parameter(
        "jpeg_quality",
        INTEGER,
        90,
        "JPEG quality for raw camera frames (1-100); 0: send raw rgb8. JPEG inputs are forwarded "
        "as is",
        (in_range(0, 100, "0 (raw) or 1..100"),),
    ),
    Parameter(
        "resize_to_policy",
        BOOL,
        True,
        "Shrink camera frames larger than the policy's trained resolution to it before encoding "
        "(the resize the server would apply); false: send them at full size",
    ),
    Parameter(
        "buffer_time_s",
        FLOAT,
        0.5,
        "Request the next chunk when the queued actions cover at most this long (seconds)",
        (positive(),),
    ),
    Parameter(
        "request_latency_margin",
        FLOAT,
        1.5,
        "Request earlier when the queue covers at most p95 round trip x this + one action (capped "
        "at a chunk)",
        (positive(),),
    ),
    Parameter(
        "request_timeout_s",
        FLOAT,
        1.0,
        "Give up waiting for the chunk answering a request after this long (seconds)",
        (positive(),),
    ),
    Parameter(
        "degraded_after_s",
        FLOAT,
        2.5,
        "No chunk merged for this long while actions remain: DEGRADED (seconds)",
        (positive(),),
    ),
    Parameter(
        "max_action_age_s",
        FLOAT,
        3.0,
        "Never execute an action whose source observation is older than this (seconds)",
        (positive(),),
    ),
    Parameter(
        "max_offline_s",
        FLOAT,
        30.0,
        "No chunk merged for longer than this (accepted re-handshakes do not count): OFFLINE, "
        "holding "
        "until resumed (seconds)",
        (positive(),),
    ),
    Parameter(
        "auto_resume",
        BOOL,
        False,
        "OFFLINE: restart motion as soon as a session opens again; false: only on ~/resume, a new "
        "RunPolicy goal or lifecycle activate",
    ),
    Parameter(
        "reconnect_backoff_initial_s",
        FLOAT,
        0.5,
        "First wait before re-handshaking after the server was lost (seconds)",
        (positive(),),
    ),
    Parameter(
        "reconnect_backoff_max_s",
        FLOAT,
        5.0,
        "Cap of the doubling wait between re-handshake attempts (seconds)",
        (positive(),),
    ),
    Parameter(
        "heartbeat_timeout_s",
        FLOAT,
        2.0,
        "Server heartbeat (<server_namespace>/status) silent this long: RECONNECTING (seconds)",
        (positive(),),
    ),
    Parameter(
        "fallback",
        STRING,
        "hold",
        "Published instead of policy actions when none is fresh: hold, repeat_last or zero",
        (one_of(FALLBACK_MODES),),
        runtime=True,
    ),
    Parameter(
        "joint_lower_limits",
        FLOAT_LIST,
        [],
        "Per-joint lower position limits, in joint order; empty: none",
        _LIMIT_CHECKS,
        runtime=True,
    ),
    Parameter(
        "joint_upper_limits",
        FLOAT_LIST,
        [],
        "Per-joint upper position limits, in joint order; empty: none",
        _LIMIT_CHECKS,
        runtime=True,
    ),
    Parameter(
        "require_joint_limits",
        BOOL,
        False,
        "Refuse to configure without joint limits (these parameters, or robot_description's "
        "URDF); "
        "robot.launch.py sets it for a real robot",
    ),
    Parameter(
        "max_step_per_tick",
        FLOAT,
        0.0,
        "Largest change of any joint command per action (1/fps), scaled to each control tick; 0: "
        "no limit",
        (at_least(0, "0 (no limit) or more"),),
        runtime=True,
    ),
    Parameter(
        "reject_non_finite",
        BOOL,
        True,
        "Replace a non-finite action by holding the reference position",
        runtime=True,
    ),
    Parameter(
        "max_observation_age_s",
        FLOAT,
        0.5,
        "Do not send an observation whose joint state or camera frame is older (seconds)",
        (positive(),),
    ),
    Parameter(
        "handshake_timeout_s",
        FLOAT,
        30.0,
        "How long to wait for the server to answer at start-up (seconds)",
        (positive(),),
    ),
    Parameter(
        "rtc_requested",
        BOOL,
        True,
        "Ask for real-time chunking (used only when the server's policy supports it)",
    ),
    Parameter(
        "status_period_s",
        FLOAT,
        0.2,
        "Period of ~/status (ExecutorStatus) and RunPolicy feedback (seconds); /diagnostics is "
        "every second",
        (positive(),),
    ),
    Parameter(
        "handshake_only",
        BOOL,
        False,
        "Only check this robot against the server (get_status), print the outcome and exit",
    ),
    Parameter(
        "autostart",
        BOOL,
        True,
        "Configure and activate at start-up (one command streams); false: stay unconfigured for a "
        "lifecycle manager",
    ),
    Parameter(
        "wait_for_goal",
        BOOL,
        False,
        "Hold position while no RunPolicy goal (or start_policy) is active; false: stream the "
        "`task` "
        "between goals",
    ),
)


# ---- cross-field rules (each gets the converted settings) ------------------


def backoff_initial_not_above_max(settings: ExecutorSettings) -> str | None:
    return backoff_problem(settings.reconnect_backoff_initial_s, settings.reconnect_backoff_max_s)


def one_topic_per_camera(settings: ExecutorSettings) -> str | None:
    topics, cameras = settings.camera_topics, settings.camera_names
    if len(topics) == len(cameras):
        return None
    return (
        f"'camera_topics' holds {len(topics)} topics for {len(cameras)} cameras {list(cameras)}; "
        "give one topic per camera, index-aligned"
    )


def one_transport_per_camera_or_none(settings: ExecutorSettings) -> str | None:
    transports, cameras = settings.camera_transports, settings.camera_names
    if not transports or len(transports) == len(cameras):
        return None
    return (
        f"'camera_transports' holds {len(transports)} entries for {len(cameras)} cameras; "
        "give one per camera (raw or compressed), or none for all raw"
    )


def _one_limit_per_joint(
    name: str, limits: tuple[float, ...], joints: tuple[str, ...]
) -> str | None:
    if limits and joints and len(limits) != len(joints):
        return (
            f"'{name}' holds {len(limits)} values, expected none or {len(joints)} (one per joint)"
        )
    return None


def one_lower_limit_per_joint(settings: ExecutorSettings) -> str | None:
    return _one_limit_per_joint(
        "joint_lower_limits", settings.joint_lower_limits, settings.joint_names
    )


def one_upper_limit_per_joint(settings: ExecutorSettings) -> str | None:
    return _one_limit_per_joint(
        "joint_upper_limits", settings.joint_upper_limits, settings.joint_names
    )


def lower_limits_not_above_upper(settings: ExecutorSettings) -> str | None:
    lower, upper, joints = (
        settings.joint_lower_limits,
        settings.joint_upper_limits,
        settings.joint_names,
    )
    if not lower or len(lower) != len(upper):
        return None
    crossed = [
        joints[i] if i < len(joints) else str(i)
        for i, (low, high) in enumerate(zip(lower, upper, strict=False))
        if low > high
    ]
    return f"'joint_lower_limits' is above 'joint_upper_limits' for {crossed}" if crossed else None


def control_rate_not_below_fps(settings: ExecutorSettings) -> str | None:
    rate = settings.control_rate_hz
    if rate == 0 or rate >= settings.fps:
        return None
    return (
        f"'control_rate_hz' {rate:g} is below 'fps' {settings.fps:g}; give 0 (= fps) or a rate of "
        "at least fps "
        "(the control loop interpolates between actions, it never skips them)"
    )


def joint_mapping_is_whole(settings: ExecutorSettings) -> str | None:
    return mapping_problem(
        settings.joint_names,
        settings.policy_joint_names,
        settings.joint_scale,
        settings.joint_offset,
    )


RULES = (
    joint_mapping_is_whole,
    backoff_initial_not_above_max,
    control_rate_not_below_fps,
    one_topic_per_camera,
    one_transport_per_camera_or_none,
    one_lower_limit_per_joint,
    one_upper_limit_per_joint,
    lower_limits_not_above_upper,
)

_BY_NAME = {entry.name: entry for entry in PARAMETERS}
#: A handshake_only run only asks the server whether this robot fits: it checks just these.
_CHECKED_WHEN_HANDSHAKE_ONLY = (_BY_NAME["joint_names"], _BY_NAME["handshake_timeout_s"])


class ExecutorSettings(settings_dataclass(PARAMETERS, RULES)):
    """Validated parameters, in the types the executor uses (string lists without placeholders)."""

    @classmethod
    def from_values(
        cls, values: Mapping, node_namespace: str = "/", hostname: str | None = None
    ) -> ExecutorSettings:
        """Validated settings with the empty defaults filled: the client id, the output topic, the
        transports."""
        settings = super().from_values(values)
        return replace(
            settings,
            client_id=settings.client_id
            or default_client_id(hostname or socket.gethostname(), node_namespace),
            # handshake_only skips the output checks: an unknown mode then has no default topic.
            output_topic=settings.output_topic
            or getattr(OUTPUT_MODES.get(settings.output_mode), "default_topic", ""),
            camera_transports=settings.camera_transports or ("raw",) * len(settings.camera_names),
        )

    def problems(self) -> list[str]:
        # it only asks the server: nothing else is used, so nothing else can be wrong
        if self.handshake_only:
            return table_problems(self, _CHECKED_WHEN_HANDSHAKE_ONLY, ())
        return super().problems()

    @property
    def command_rate_hz(self) -> float:
        """Commands per second: ``control_rate_hz``, or ``fps`` when it is 0."""
        return self.control_rate_hz or self.fps

    @cached_property
    def fleet(self) -> FleetSpec:
        """What ``server_namespaces`` asks for: a fixed list (``server_namespace`` alone when
        empty), or discovery."""
        return fleet_spec(self.server_namespaces or (self.server_namespace,))

    @property
    def replicas(self) -> tuple[str, ...]:
        """The configured server namespaces, in order (one: the simple single-server case); () when
        discovered."""
        return self.fleet.listed

    @property
    def is_fleet(self) -> bool:
        """Several replicas, or discovered ones: a replica serving another model is skipped, never
        fatal."""
        return self.fleet.discovers or len(self.fleet.listed) > 1

    @property
    def keeps_standby(self) -> bool:
        """A fleet robot with ``standby_session``: a second session is kept warm for failover
        (hedging.py)."""
        return self.standby_session and self.is_fleet and not self.handshake_only

    @property
    def state_dim(self) -> int:
        return len(self.joint_names) * (2 if self.state_include_velocity else 1)

    @cached_property
    def mapping(self) -> JointMapping:
        """Robot joints and units <-> the policy's (joint_mapping.py); identity when not
        configured."""
        return JointMapping.of(
            self.joint_names, self.policy_joint_names, self.joint_scale, self.joint_offset
        )

    @cached_property
    def failsafe(self) -> FailSafeConfig | None:
        """The state machine's timeouts; None in a handshake_only run, which never streams."""
        if self.handshake_only:
            return None
        return FailSafeConfig(
            degraded_after_s=self.degraded_after_s,
            max_action_age_s=self.max_action_age_s,
            max_offline_s=self.max_offline_s,
            heartbeat_timeout_s=self.heartbeat_timeout_s,
            reconnect_backoff_initial_s=self.reconnect_backoff_initial_s,
            reconnect_backoff_max_s=self.reconnect_backoff_max_s,
            move_at_once=self.is_fleet,
            auto_resume=self.auto_resume,
        )


def default_client_id(hostname: str, node_namespace: str) -> str:
    """A stable client id for this robot: host name plus the node's namespace."""
    return sanitize_client_id(f"{hostname}_{node_namespace.strip('/')}")


def timing_warnings(
    settings: ExecutorSettings,
    chunk_size: int,
    replace_mode: bool = False,
    threshold_s: float | None = None,
) -> list[str]:
    """Settings that work against a policy's chunk length (known after the handshake).

    ``threshold_s`` is the request threshold in force (``trigger.py``; None:
    ``buffer_time_s``). In append mode the last row of a chunk is executed
    ``threshold_s + chunk_size / fps`` after its observation was taken, and
    chunks arrive every ``chunk_size / fps`` (each one is played whole). In
    replace mode the queue is refilled once it drains to the threshold: every
    ``chunk_size / fps - threshold_s``.
    """
    warnings = []
    threshold_s = settings.buffer_time_s if threshold_s is None else threshold_s
    chunk_s = chunk_size / settings.fps
    period_s = chunk_s - threshold_s if replace_mode else chunk_s
    if threshold_s + chunk_s > settings.failsafe.max_action_age_s:
        warnings.append(
            f"max_action_age_s {settings.failsafe.max_action_age_s} is below the request "
            "threshold + chunk duration "
            f"({threshold_s:.3f} + {chunk_s:.3f} s): the tail of every chunk will be dropped as "
            "stale"
        )
    if period_s >= settings.failsafe.degraded_after_s:
        warnings.append(
            f"degraded_after_s {settings.failsafe.degraded_after_s} is below the chunk period "
            f"({period_s:.3f} s in {'replace' if replace_mode else 'append'} mode): "
            "the executor will report DEGRADED while streaming"
        )
    return warnings
