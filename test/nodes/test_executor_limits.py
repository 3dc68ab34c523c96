"""A real robot refuses to configure without joint limits, and takes them from robot_description
(issue 33)."""

from __future__ import annotations

from std_msgs.msg import String

from lerobot_ros.protocol.qos import LATCHED_QOS
from lerobot_ros.sim.arm import ArmConfig
from lerobot_ros.sim.description import ArmDescription
from support.ros import spin_until


def test_without_limits_the_robot_is_refused_and_a_published_urdf_gives_them(
    policy_server, launched, ros_node
):
    robot = launched("/limits_arm", commands=[("forward_command", "/limits_arm/commands")])
    refused = launched.executor(
        "exec_no_limits", robot.executor_parameters(require_joint_limits=True)
    )
    assert spin_until(ros_node, lambda: refused.process.poll() is not None, 60), refused.log_text()
    log = refused.log_text()
    assert refused.process.returncode != 0 and "a real robot needs joint limits" in log, log
    assert "require_joint_limits:=false" in log and robot.commands() == []

    publisher = ros_node.create_publisher(String, "/robot_description", LATCHED_QOS)
    publisher.publish(String(data=ArmDescription.for_arm(ArmConfig()).urdf()))
    try:
        limited = launched.executor(
            "exec_urdf_limits", robot.executor_parameters(require_joint_limits=True)
        )
        limited.wait(lambda s: s.state_name == "STREAMING", 60, "streaming with the URDF's limits")
        assert "joint limits from robot_description" in limited.log_text()
        # A runtime change of another safety entry keeps the URDF's limits: a command far outside
        # stays clamped.
        from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
        from rcl_interfaces.srv import SetParameters

        from support.ros import call_service

        step = Parameter(
            name="max_step_per_tick",
            value=ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=0.5),
        )
        answer = call_service(
            ros_node,
            SetParameters,
            "/exec_urdf_limits/set_parameters",
            SetParameters.Request(parameters=[step]),
            10.0,
        )
        assert answer.results[0].successful, answer.results[0].reason
        limited.spin(1.0)
        from lerobot_ros.sim.so101 import JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS

        for command in robot.commands()[-20:]:
            assert all(
                lo - 1e-9 <= v <= hi + 1e-9
                for v, lo, hi in zip(
                    command["values"], JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS, strict=False
                )
            ), command
    finally:
        ros_node.destroy_publisher(publisher)
