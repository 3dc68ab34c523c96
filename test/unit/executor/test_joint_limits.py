"""A real robot's joint limits: from parameters or its URDF, else a refusal that says how (issue
33)."""

from __future__ import annotations

from lerobot_ros.executor.control.joint_limits import limits_problem, urdf_limits
from lerobot_ros.launch_plan import robot_plan
from lerobot_ros.sim.arm import ArmConfig
from lerobot_ros.sim.description import ArmDescription
from lerobot_ros.sim.so101 import JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS, SO101_JOINT_NAMES


def test_the_sims_urdf_gives_every_joints_limits_by_name():
    urdf = ArmDescription.for_arm(ArmConfig()).urdf()
    lower, upper = urdf_limits(urdf, list(reversed(SO101_JOINT_NAMES)))
    assert lower == list(reversed(JOINT_LOWER_LIMITS)) and upper == list(
        reversed(JOINT_UPPER_LIMITS)
    )
    assert "no position limits for ['elbow_2']" in urdf_limits(urdf, ["elbow_2"])
    assert urdf_limits("<robot", ["a"]).startswith("robot_description is not a URDF")


def test_without_limits_a_required_robot_is_refused_with_the_three_ways_on():
    problem = limits_problem(True, [], [], None)
    assert "no robot_description was published" in problem
    assert "joint_lower_limits" in problem and "robot_description" in problem
    assert "require_joint_limits:=false" in problem and "allow_no_joint_limits:=true" in problem
    assert "no position limits" in limits_problem(
        True, [], [], "robot_description has no position limits for ['a']"
    )
    assert limits_problem(True, [0.0], [1.0], None) is None
    assert limits_problem(True, [], [], ([0.0], [1.0])) is None
    assert limits_problem(False, [], [], None) is None


def test_robot_launch_requires_limits_for_a_real_robot_only():
    (executor,) = robot_plan().nodes
    assert executor.parameters["require_joint_limits"] is True
    (executor,) = robot_plan(allow_no_joint_limits=True).nodes
    assert "require_joint_limits" not in executor.parameters
    sim, executor = robot_plan(sim=True).nodes
    assert "require_joint_limits" not in executor.parameters
