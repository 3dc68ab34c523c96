"""The simulated arm: dynamics, commands by name, a camera that sees the joints move."""

import numpy as np
import pytest

from lerobot_ros.protocol.wire.output_modes import in_joint_order, reorder_by_name
from lerobot_ros.sim.arm import ArmCamera, ArmConfig, SimulatedArm
from lerobot_ros.sim.command_input import TimedTrajectory
from lerobot_ros.sim.so101 import HOME_POSE, SO101_JOINT_NAMES


def test_the_arm_tracks_a_command_within_its_velocity_limit():
    arm = SimulatedArm(ArmConfig(max_velocity=2.0))
    target = np.array([0.5, -1.0, 1.5, 0.8, 1.0, 1.0])
    arm.command(target)
    previous = arm.position.copy()
    for _ in range(200):
        arm.step(0.01)
        assert np.abs(arm.position - previous).max() <= 2.0 * 0.01 + 1e-12
        previous = arm.position.copy()
    np.testing.assert_allclose(arm.position, target, atol=1e-3)


def test_targets_beyond_the_joint_limits_are_clipped_and_nan_is_refused():
    arm = SimulatedArm(ArmConfig())
    arm.command(np.full(6, 10.0))
    for _ in range(500):
        arm.step(0.01)
    np.testing.assert_allclose(arm.position, ArmConfig().upper)
    with pytest.raises(ValueError, match="not finite"):
        arm.command(np.array([0, 0, np.nan, 0, 0, 0]))
    with pytest.raises(ValueError, match="command has 5 values; the arm has 6 joints"):
        arm.command(np.zeros(5))


def test_camera_frames_change_with_the_joints_and_are_deterministic():
    camera = ArmCamera(96, 128, seed=3)
    cube = (80.0, 65.0)
    home = camera.render(np.array(HOME_POSE), cube)
    moved = camera.render(np.array(HOME_POSE) + 0.4, cube)
    assert home.shape == (96, 128, 3) and home.dtype == np.uint8
    assert np.abs(home.astype(int) - moved.astype(int)).mean() > 1.0
    np.testing.assert_array_equal(
        home, ArmCamera(96, 128, seed=3).render(np.array(HOME_POSE), cube)
    )
    assert not np.array_equal(home, ArmCamera(96, 128, seed=4).render(np.array(HOME_POSE), cube))
    gripper_only = camera.render(np.array(HOME_POSE) + [0, 0, 0, 0, 0, 0.8], cube)
    assert not np.array_equal(home, gripper_only), "the gripper must be visible"
    assert not np.array_equal(home, camera.render(np.array(HOME_POSE), (60.0, 70.0))), (
        "the cube must be visible"
    )


def test_commands_are_mapped_by_name():
    shuffled = list(reversed(SO101_JOINT_NAMES))
    values = np.arange(6.0)[::-1]
    np.testing.assert_array_equal(
        reorder_by_name(shuffled, values, SO101_JOINT_NAMES), np.arange(6.0)
    )
    with pytest.raises(ValueError, match=r"lacks joints \['gripper'\]"):
        reorder_by_name(SO101_JOINT_NAMES[:5], np.zeros(5), SO101_JOINT_NAMES)
    with pytest.raises(ValueError, match="command has 5 values; expected 6"):
        in_joint_order(np.zeros(5), SO101_JOINT_NAMES)


def test_a_timed_trajectory_interpolates_from_the_start_and_holds_the_end():
    trajectory = TimedTrajectory(
        np.zeros(2), [0.1, 0.2], [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    )
    np.testing.assert_allclose(trajectory.target_at(0.05), [0.5, 1.0])
    np.testing.assert_allclose(trajectory.target_at(0.15), [2.0, 3.0])
    np.testing.assert_allclose(trajectory.target_at(5.0), [3.0, 4.0])
    with pytest.raises(ValueError, match="increase strictly"):
        TimedTrajectory(np.zeros(2), [0.2, 0.1], [np.zeros(2), np.zeros(2)])
