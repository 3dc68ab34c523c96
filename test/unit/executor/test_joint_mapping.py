"""A checkpoint whose joints have other names and units than the robot's (issue 33): state in,
actions out."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sensor_msgs.msg import Image

from lerobot_ros.executor.control.joint_mapping import JointMapping, mapping_problem
from support.executor_harness import CAMERA, JOINTS, connected, settings

DEGREES = 180.0 / math.pi


def test_degrees_and_a_gripper_range_round_trip():
    # SO-101 in LeRobot: degrees, gripper 0..100 over a robot gripper of 0..1.2 rad.
    mapping = JointMapping.of(
        ["j1", "gripper"], ["shoulder_pan.pos", "gripper.pos"], [DEGREES, 100 / 1.2], [0.0, 0.0]
    )
    robot = np.array([math.pi / 2, 0.6])
    policy = mapping.to_policy(robot)
    np.testing.assert_allclose(policy, [90.0, 50.0])
    np.testing.assert_allclose(mapping.to_robot(policy), robot)
    assert not JointMapping.of(["a", "b"]).changes_units and JointMapping.of(
        ["a", "b"]
    ).policy_names == ("a", "b")


def test_a_mapping_that_does_not_cover_every_joint_is_refused_with_what_differs():
    assert "one entry per joint of joint_names (3), got 2" in mapping_problem(
        "abc", ["x", "y"], [], []
    )
    assert "non-zero" in mapping_problem("ab", [], [1.0, 0.0], [])
    assert "twice" in mapping_problem("ab", ["x", "x"], [], [])
    with pytest.raises(ValueError, match="one entry per joint"):
        settings(joint_scale=[1.0])


def test_the_policy_gets_its_names_and_units_and_the_robot_its_own():
    clock, core, link, worker = connected(
        joint_names=["x", "y", "z"],
        policy_joint_names=list(JOINTS),
        joint_scale=[2.0, 2.0, 2.0],
        joint_offset=[1.0, 1.0, 1.0],
    )
    core.on_joint_state(["z", "y", "x"], [0.3, 0.2, 0.1], [], clock())
    core.on_camera(CAMERA, Image(), clock())
    worker.step()
    sent = link.sent[-1]
    np.testing.assert_allclose(sent.observation.state, [1.2, 1.4, 1.6], rtol=1e-6)  # 2 x robot + 1
    clock.t += 0.1
    command = core.control_tick(clock())
    # FakeLink answers rows 0..9 (policy units) on every joint: row 0 is (0 - 1) / 2 in robot
    # units.
    np.testing.assert_allclose(command, [-0.5, -0.5, -0.5])
