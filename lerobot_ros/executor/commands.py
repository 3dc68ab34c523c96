"""The three command messages the executor can publish, built from one action.

Invariant: every command names (or, for Float64MultiArray, orders) its values
in the robot's joint order, which is the policy's action order validated at
session open. Float arrays are assigned as ``array.array`` (rclpy iterates
numpy arrays element by element).

joint_trajectory mode publishes ONE point per control tick, reached at
``time_from_start`` = one control period, rather than the whole queued chunk
as one timed trajectory: every point then passes the same per-tick fail-safe
decision (staleness bound, pause, DEAD) and safety envelope as the other
modes, and a trajectory controller never keeps executing actions the
executor has since declared stale, paused or dead.
"""

from __future__ import annotations

import array

import numpy as np
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from lerobot_ros.wire import duration_from_seconds


def _doubles(action: np.ndarray) -> array.array:
    return array.array("d", np.ascontiguousarray(action, dtype=np.float64).tobytes())


def forward_command(joint_names: tuple[str, ...], action: np.ndarray) -> Float64MultiArray:
    """For ros2_control forward_command_controller: data in joint order."""
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label="joints", size=len(joint_names), stride=len(joint_names))]
    msg.data = _doubles(action)
    return msg


def joint_trajectory(joint_names: tuple[str, ...], action: np.ndarray, period_s: float, stamp=None) -> JointTrajectory:
    """For joint_trajectory_controller: one point, reached one control period from now.

    ``stamp`` (a builtin_interfaces Time) left unset (zero) means "start now".
    """
    msg = JointTrajectory()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.joint_names = list(joint_names)
    point = JointTrajectoryPoint()
    point.positions = _doubles(action)
    point.time_from_start = duration_from_seconds(period_s)
    msg.points = [point]
    return msg


def joint_state(joint_names: tuple[str, ...], action: np.ndarray, stamp=None) -> JointState:
    """A sensor_msgs/JointState with the commanded positions, by name."""
    msg = JointState()
    if stamp is not None:
        msg.header.stamp = stamp
    msg.name = list(joint_names)
    msg.position = _doubles(action)
    return msg


MESSAGE_TYPES = {
    "forward_command": Float64MultiArray,
    "joint_trajectory": JointTrajectory,
    "joint_state": JointState,
}


def build(mode: str, joint_names: tuple[str, ...], action: np.ndarray, period_s: float, stamp=None):
    """The command message of ``mode`` for one action."""
    if len(action) != len(joint_names):
        raise ValueError(f"action has {len(action)} values for {len(joint_names)} joints {list(joint_names)}")
    if mode == "forward_command":
        return forward_command(joint_names, action)
    if mode == "joint_trajectory":
        return joint_trajectory(joint_names, action, period_s, stamp)
    if mode == "joint_state":
        return joint_state(joint_names, action, stamp)
    raise ValueError(f"output mode must be one of {list(MESSAGE_TYPES)}, got {mode!r}")
