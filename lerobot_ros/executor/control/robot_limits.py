"""The node's side of ``joint_limits``: read robot_description once, and take its limits or refuse
(ROS shell)."""

from __future__ import annotations

import dataclasses

from std_msgs.msg import String

from lerobot_ros.executor.control.joint_limits import limits_problem, urdf_limits
from lerobot_ros.executor.requests.sensor_node import SensorNode, read_latched
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.node_shell.node_support import TransitionFailed, parameter_table
from lerobot_ros.protocol.qos import LATCHED_QOS

#: How long configure waits for a latched robot_description (published once, kept for late
#: subscribers). Only a robot without limit parameters waits; long enough for robot_state_publisher
#: started by the same launch and for discovery on a loaded machine (2 s missed it in a CI run),
#: short enough that a robot without one fails soon.
DESCRIPTION_WAIT_S = 10.0


def required_limits(node, settings: ExecutorSettings) -> ExecutorSettings:
    """``settings`` with the URDF's limits, or TransitionFailed saying how to give the robot
    limits."""
    sensors = SensorNode(node)
    try:
        message = read_latched(
            sensors, String, "robot_description", LATCHED_QOS, DESCRIPTION_WAIT_S
        )
    finally:
        sensors.destroy()
    from_urdf = None if message is None else urdf_limits(message.data, settings.joint_names)
    problem = limits_problem(
        True, settings.joint_lower_limits, settings.joint_upper_limits, from_urdf
    )
    if problem:
        raise TransitionFailed(problem)
    lower, upper = from_urdf
    node.get_logger().info(f"joint limits from robot_description: lower {lower}, upper {upper}")
    limited = dataclasses.replace(
        settings, joint_lower_limits=tuple(lower), joint_upper_limits=tuple(upper)
    )
    # A later `ros2 param set` (max_step_per_tick, fallback) starts from these settings, never
    # drops the limits.
    parameter_table(node).current = limited
    return limited
