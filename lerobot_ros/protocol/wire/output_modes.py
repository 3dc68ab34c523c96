"""The executor's output modes: the command messages a robot can be driven with.

Invariant: each mode is ONE entry holding everything about its message — the
ROS type, the default topic, how the executor builds it from an action and how
a receiver (the simulated arm, the demo's monitor) reads the positions back —
so the executor can only publish what the simulated arm understands, and a new
mode is one entry here. Commands are read by name wherever the message names
its joints (JointTrajectory, JointState), so a driver never moves the wrong
motor because a sender ordered its joints differently; Float64MultiArray
carries no names and is taken in the receiver's joint order, as ros2_control's
forward controllers do. Float arrays are assigned as ``array.array`` (rclpy
iterates numpy arrays element by element).

Importable without ROS: message classes are imported when a message is first
built, read or its type asked for, so launch files and plans can list modes.

joint_trajectory publishes ONE point per control tick, reached at
``time_from_start`` = one control period, rather than the whole queued chunk
as one timed trajectory: every point then passes the same per-tick fail-safe
decision (staleness bound, pause, DEAD) and safety envelope as the other
modes, and a trajectory controller never keeps executing actions the
executor has since declared stale, paused or dead.
"""

from __future__ import annotations

import array
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class JointCommand:
    """What a command message asks of the joints, in the receiver's joint order.

    ``time_from_start_s`` None: reach ``positions[0]`` now. Otherwise a timed
    trajectory: ``positions[i]`` is due ``time_from_start_s[i]`` seconds after
    the trajectory starts.
    """

    positions: tuple[np.ndarray, ...]
    time_from_start_s: tuple[float, ...] | None = None


@dataclass(frozen=True)
class OutputMode:
    """One way to command the joints: a message type, its default topic, its writer and reader."""

    name: str
    #: ROS type as ``package/msg/Name``.
    message: str
    #: Where the executor publishes when ``output_topic`` is empty. The
    #: simulated arm listens on the same name relative to its namespace.
    default_topic: str
    description: str
    #: (joint_names, action, period_s, stamp or None) -> message; the action is in joint order.
    build_message: Callable
    #: (message, joint_names) -> JointCommand; raises ValueError for a command it cannot follow.
    read: Callable[[object, Sequence[str]], JointCommand]

    @property
    def message_type(self) -> type:
        package, _, name = self.message.split("/")
        return getattr(importlib.import_module(f"{package}.msg"), name)

    @property
    def sim_topic(self) -> str:
        """Where sim_robot_node subscribes, relative to the robot namespace."""
        return self.default_topic.lstrip("/")

    def build(self, joint_names: Sequence[str], action: np.ndarray, period_s: float, stamp=None):
        """The command message for one action; ``stamp`` (builtin_interfaces Time) unset means
        "now"."""
        if len(action) != len(joint_names):
            raise ValueError(
                f"action has {len(action)} values for {len(joint_names)} joints "
                f"{list(joint_names)}"
            )
        return self.build_message(tuple(joint_names), action, period_s, stamp)


def reorder_by_name(
    names: Sequence[str], values: Sequence[float], joint_names: Sequence[str]
) -> np.ndarray:
    """``values`` keyed by ``names``, rearranged into ``joint_names`` order."""
    if len(names) != len(values):
        raise ValueError(f"{len(names)} joint names but {len(values)} values")
    lookup = dict(zip(names, values, strict=False))
    missing = [name for name in joint_names if name not in lookup]
    if missing:
        raise ValueError(
            f"command lacks joints {missing}; expected all of {list(joint_names)}, got "
            f"{list(names)}"
        )
    return np.array([lookup[name] for name in joint_names], dtype=np.float64)


def in_joint_order(values: Sequence[float], joint_names: Sequence[str]) -> np.ndarray:
    if len(values) != len(joint_names):
        raise ValueError(
            f"command has {len(values)} values; expected {len(joint_names)} for "
            f"{list(joint_names)}"
        )
    return np.asarray(values, dtype=np.float64)


def _doubles(action: np.ndarray) -> array.array:
    return array.array("d", np.ascontiguousarray(action, dtype=np.float64).tobytes())


def _build_float64_multi_array(joint_names, action, period_s, stamp):
    from std_msgs.msg import Float64MultiArray, MultiArrayDimension

    msg = Float64MultiArray()
    msg.layout.dim = [
        MultiArrayDimension(label="joints", size=len(joint_names), stride=len(joint_names))
    ]
    msg.data = _doubles(action)
    return msg


def _read_float64_multi_array(msg, joint_names) -> JointCommand:
    return JointCommand((in_joint_order(msg.data, joint_names),))


def _build_joint_trajectory(joint_names, action, period_s, stamp):
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    from lerobot_ros.protocol.wire.control_plane import duration_from_seconds

    msg = JointTrajectory()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.joint_names = list(joint_names)
    point = JointTrajectoryPoint()
    point.positions = _doubles(action)
    point.time_from_start = duration_from_seconds(period_s)
    msg.points = [point]
    return msg


def _read_joint_trajectory(msg, joint_names) -> JointCommand:
    from lerobot_ros.protocol.wire.control_plane import seconds_from_duration

    return JointCommand(
        tuple(
            reorder_by_name(msg.joint_names, point.positions, joint_names) for point in msg.points
        ),
        tuple(seconds_from_duration(point.time_from_start) for point in msg.points),
    )


def _build_joint_state(joint_names, action, period_s, stamp):
    from sensor_msgs.msg import JointState

    msg = JointState()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.name = list(joint_names)
    msg.position = _doubles(action)
    return msg


def _read_joint_state(msg, joint_names) -> JointCommand:
    return JointCommand((reorder_by_name(msg.name, msg.position, joint_names),))


#: Every output mode, by name.
OUTPUT_MODES: dict[str, OutputMode] = {
    mode.name: mode
    for mode in (
        OutputMode(
            name="forward_command",
            message="std_msgs/msg/Float64MultiArray",
            default_topic="/forward_position_controller/commands",
            description="positions in joint order, for ros2_control's forward_command_controller",
            build_message=_build_float64_multi_array,
            read=_read_float64_multi_array,
        ),
        OutputMode(
            name="joint_trajectory",
            message="trajectory_msgs/msg/JointTrajectory",
            default_topic="/joint_trajectory_controller/joint_trajectory",
            description="one point by joint name per tick, reached one control period later, "
            "for joint_trajectory_controller",
            build_message=_build_joint_trajectory,
            read=_read_joint_trajectory,
        ),
        OutputMode(
            name="joint_state",
            message="sensor_msgs/msg/JointState",
            default_topic="joint_commands",
            description="positions by joint name",
            build_message=_build_joint_state,
            read=_read_joint_state,
        ),
    )
}
DEFAULT_OUTPUT_MODE = "forward_command"


def output_mode(name: str) -> OutputMode:
    """The mode called ``name``; a ValueError listing the modes for any other name."""
    try:
        return OUTPUT_MODES[name]
    except KeyError:
        raise ValueError(f"output_mode {name!r} is not one of {list(OUTPUT_MODES)}") from None


def help_text() -> str:
    """Every mode with what it is for, for command-line help."""
    return "; ".join(
        f"{mode.name}: {mode.message}, {mode.description}" for mode in OUTPUT_MODES.values()
    )


def choices_text() -> str:
    """The modes with their message types, for parameter and launch argument descriptions."""
    entries = [f"{mode.name} ({mode.message.split('/')[-1]})" for mode in OUTPUT_MODES.values()]
    return ", ".join(entries[:-1]) + " or " + entries[-1]
