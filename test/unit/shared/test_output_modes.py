"""The output-mode registry: what each mode publishes, where, and that receivers read it back."""

import subprocess
import sys

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from lerobot_ros.protocol.wire.output_modes import (
    DEFAULT_OUTPUT_MODE,
    OUTPUT_MODES,
    choices_text,
    help_text,
    output_mode,
)
from lerobot_ros.sim.arm import ArmConfig, SimulatedArm
from lerobot_ros.sim.command_input import CommandFollower
from lerobot_ros.sim.so101 import HOME_POSE, SO101_JOINT_NAMES

JOINTS = ("a", "b", "c")


def test_the_modes_their_messages_and_topics_are_the_ros_surface():
    assert list(OUTPUT_MODES) == ["forward_command", "joint_trajectory", "joint_state"]
    assert DEFAULT_OUTPUT_MODE == "forward_command"
    assert {name: mode.message_type for name, mode in OUTPUT_MODES.items()} == {
        "forward_command": Float64MultiArray,
        "joint_trajectory": JointTrajectory,
        "joint_state": JointState,
    }
    assert {name: mode.default_topic for name, mode in OUTPUT_MODES.items()} == {
        "forward_command": "/forward_position_controller/commands",
        "joint_trajectory": "/joint_trajectory_controller/joint_trajectory",
        "joint_state": "joint_commands",
    }
    assert {name: mode.sim_topic for name, mode in OUTPUT_MODES.items()} == {
        "forward_command": "forward_position_controller/commands",
        "joint_trajectory": "joint_trajectory_controller/joint_trajectory",
        "joint_state": "joint_commands",
    }
    assert (
        choices_text()
        == "forward_command (Float64MultiArray), joint_trajectory (JointTrajectory) or "
        "joint_state (JointState)"
    )
    assert help_text().startswith(
        "forward_command: std_msgs/msg/Float64MultiArray, positions in joint order"
    )
    assert all(f"{name}: " in help_text() for name in OUTPUT_MODES)


@pytest.mark.parametrize("name", list(OUTPUT_MODES))
def test_every_mode_builds_a_message_its_reader_decodes_to_the_same_positions(name):
    mode = output_mode(name)
    action = np.array([0.1, -0.2, 0.3])
    msg = mode.build(JOINTS, action, 0.02)
    assert isinstance(msg, mode.message_type)
    command = mode.read(msg, JOINTS)
    assert len(command.positions) == 1
    np.testing.assert_array_equal(command.positions[0], action)
    if name == "joint_trajectory":
        assert command.time_from_start_s == (pytest.approx(0.02),)
    else:
        assert command.time_from_start_s is None


@pytest.mark.parametrize("name", ["joint_trajectory", "joint_state"])
def test_named_modes_are_read_by_name_whatever_order_the_sender_chose(name):
    mode = output_mode(name)
    msg = mode.build(("c", "a", "b"), np.array([3.0, 1.0, 2.0]), 0.02)
    np.testing.assert_array_equal(mode.read(msg, JOINTS).positions[0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match=r"lacks joints \['d'\]"):
        mode.read(msg, (*JOINTS, "d"))


def test_a_message_with_the_wrong_number_of_values_is_refused_both_ways():
    with pytest.raises(ValueError, match="2 values for 3 joints"):
        output_mode("forward_command").build(JOINTS, np.zeros(2), 0.02)
    msg = output_mode("forward_command").build(JOINTS[:2], np.zeros(2), 0.02)
    with pytest.raises(ValueError, match="command has 2 values; expected 3"):
        output_mode("forward_command").read(msg, JOINTS)


def test_an_unknown_mode_is_refused_with_the_list_of_modes():
    with pytest.raises(
        ValueError,
        match=r"output_mode 'velocity' is not one of "
        r"\['forward_command', 'joint_trajectory', 'joint_state'\]",
    ):
        output_mode("velocity")


def test_the_simulated_arm_follows_each_mode_and_a_trajectory_in_time():
    arm = SimulatedArm(ArmConfig(time_constant_s=1e-3, max_velocity=100.0))
    follower = CommandFollower(arm)
    target = np.array(HOME_POSE) + 0.3
    follower.follow(
        output_mode("joint_state").read(
            output_mode("joint_state").build(SO101_JOINT_NAMES, target, 0.02), SO101_JOINT_NAMES
        ),
        now_s=0.0,
    )
    for step in range(50):
        follower.step(now_s=step * 0.01, dt_s=0.01)
    np.testing.assert_allclose(arm.position, target, atol=1e-6)
    trajectory = output_mode("joint_trajectory")
    follower.follow(
        trajectory.read(trajectory.build(SO101_JOINT_NAMES, target + 0.2, 1.0), SO101_JOINT_NAMES),
        now_s=10.0,
    )
    # halfway: the target is interpolated from where the arm was
    follower.step(now_s=10.5, dt_s=0.01)
    np.testing.assert_allclose(arm.target, target + 0.1, atol=1e-6)
    with pytest.raises(ValueError, match="non-empty"):
        follower.follow(
            trajectory.read(
                JointTrajectory(joint_names=list(SO101_JOINT_NAMES)), SO101_JOINT_NAMES
            ),
            11.0,
        )


def test_the_registry_imports_without_ros():
    code = (
        "import sys; import lerobot_ros.protocol.wire.output_modes as m; m.choices_text(); "
        "print(sorted(n for n in sys.modules if n.split('.')[0] in ('rclpy', 'std_msgs', "
        "'sensor_msgs', 'trajectory_msgs')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_output_messages_carry_joint_names_and_values_in_order():
    action = np.array([0.1, 0.2, 0.3])
    forward = output_mode("forward_command").build(JOINTS, action, 1 / 30)
    assert isinstance(forward, Float64MultiArray) and list(forward.data) == pytest.approx(
        [0.1, 0.2, 0.3]
    )
    assert forward.layout.dim[0].size == 3
    trajectory = output_mode("joint_trajectory").build(JOINTS, action, 0.02)
    assert isinstance(trajectory, JointTrajectory) and list(trajectory.joint_names) == list(JOINTS)
    assert len(trajectory.points) == 1 and list(trajectory.points[0].positions) == pytest.approx(
        [0.1, 0.2, 0.3]
    )
    assert (
        trajectory.points[0].time_from_start.sec,
        trajectory.points[0].time_from_start.nanosec,
    ) == (0, 20_000_000)
    state = output_mode("joint_state").build(JOINTS, action, 0.02)
    assert isinstance(state, JointState) and list(state.name) == list(JOINTS)
    assert list(state.position) == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="2 values for 3 joints"):
        output_mode("joint_state").build(JOINTS, action[:2], 0.02)
