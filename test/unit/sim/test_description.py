"""The sim arm's URDF and transforms: parsed, matched to the sim's joints and limits, and to its
kinematics."""

import sys
from xml.etree import ElementTree

import numpy as np
import pytest
from builtin_interfaces.msg import Time

from lerobot_ros.sim.arm import ArmConfig
from lerobot_ros.sim.description import (
    BASE_LINK,
    CUBE_FRAME,
    TIP_LINK,
    ArmDescription,
    cube_transform,
    image_to_base,
)
from lerobot_ros.sim.kinematics import Chain
from lerobot_ros.sim.so101 import (
    HOME_POSE,
    JOINT_LOWER_LIMITS,
    JOINT_UPPER_LIMITS,
    SO101_JOINT_NAMES,
)
from lerobot_ros.sim.task import TaskConfig, cube_position
from lerobot_ros.sim.tf_messages import tf_message, tf_message_type

HEIGHT, WIDTH = 96, 128


def _parsed(description: ArmDescription) -> ElementTree.Element:
    return ElementTree.fromstring(description.urdf())


def test_the_urdf_names_the_sims_joints_with_its_limits_axes_and_a_tree_rooted_at_the_base():
    config = ArmConfig(max_velocity=2.5)
    robot = _parsed(ArmDescription.for_arm(config))
    assert robot.tag == "robot"
    links = [link.get("name") for link in robot.findall("link")]
    assert len(links) == len(set(links))
    joints = robot.findall("joint")
    revolute = [joint for joint in joints if joint.get("type") == "revolute"]
    assert [joint.get("name") for joint in revolute] == list(SO101_JOINT_NAMES)
    for index, joint in enumerate(revolute):
        limit = joint.find("limit")
        assert (float(limit.get("lower")), float(limit.get("upper"))) == (
            config.lower[index],
            config.upper[index],
        )
        assert float(limit.get("velocity")) == config.max_velocity
    axes = [tuple(float(v) for v in joint.find("axis").get("xyz").split()) for joint in revolute]
    assert axes == [(0, 0, 1), (0, 1, 0), (0, 1, 0), (0, 1, 0), (0, 0, 1), (1, 0, 0)]
    # A tree: every link but the base is the child of exactly one joint, whose parent is a declared
    # link.
    children = [joint.find("child").get("link") for joint in joints]
    assert sorted(children) == sorted(set(links) - {BASE_LINK})
    assert all(joint.find("parent").get("link") in links for joint in joints)
    assert TIP_LINK in children
    # The URDF's joint origins are the transforms' translations (one joint table makes both).
    moving, fixed = ArmDescription.for_arm(config).transforms(config.initial)
    origins = {
        joint.find("child").get("link"): tuple(
            float(v) for v in joint.find("origin").get("xyz").split()
        )
        for joint in joints
    }
    assert origins == {transform.child: transform.translation for transform in moving + fixed}


def test_renamed_joints_appear_in_the_urdf_and_bad_descriptions_are_refused():
    names = tuple(f"arm_{name}" for name in SO101_JOINT_NAMES)
    robot = _parsed(ArmDescription.for_arm(ArmConfig.for_joints(names)))
    assert [
        joint.get("name") for joint in robot.findall("joint") if joint.get("type") == "revolute"
    ] == list(names)
    with pytest.raises(ValueError, match="6 distinct joint names"):
        ArmDescription(("a", "b"))
    with pytest.raises(ValueError, match="6 finite joint values"):
        ArmDescription().transforms([0.0] * 5)


@pytest.mark.parametrize("seed", range(5))
def test_with_the_pan_at_zero_the_links_are_where_the_camera_draws_them(seed):
    config = ArmConfig()
    rng = np.random.default_rng(seed)
    position = rng.uniform(config.lower, config.upper) if seed else np.array(HOME_POSE)
    position[0] = 0.0
    poses = ArmDescription().link_poses(position)
    chain = Chain(HEIGHT, WIDTH)
    shoulder, elbow, wrist, tip = chain.points(position)[0]
    for link, point in (
        ("upper_arm_link", shoulder),
        ("forearm_link", elbow),
        ("wrist_link", wrist),
        (TIP_LINK, tip),
    ):
        np.testing.assert_allclose(
            poses[link][:3, 3], image_to_base(point, HEIGHT, WIDTH), atol=1e-12
        )


def test_a_panned_arm_keeps_the_side_views_heights_and_reach_along_its_plane():
    position = np.array([0.7, -0.3, 1.1, 0.4, 1.0, 0.5])
    tip = ArmDescription().link_poses(position)[TIP_LINK][:3, 3]
    chain = Chain(HEIGHT, WIDTH)
    unpanned = image_to_base(chain.tip([0.0, *position[1:]]), HEIGHT, WIDTH)
    assert tip[2] == pytest.approx(unpanned[2])
    assert np.hypot(tip[0], tip[1]) == pytest.approx(unpanned[0])
    assert np.arctan2(tip[1], tip[0]) == pytest.approx(position[0])


def test_transforms_are_one_per_link_moving_ones_follow_the_joints():
    description = ArmDescription()
    moving, fixed = description.transforms(HOME_POSE)
    assert [t.child for t in moving] == [
        "shoulder_link",
        "upper_arm_link",
        "forearm_link",
        "wrist_link",
        "hand_link",
        "jaw_link",
    ]
    assert [(t.parent, t.child) for t in fixed] == [("hand_link", TIP_LINK)]
    for transform, angle in zip(moving, HOME_POSE, strict=False):
        assert np.linalg.norm(transform.rotation) == pytest.approx(1.0)
        assert 2 * np.arctan2(
            np.linalg.norm(transform.rotation[:3]), transform.rotation[3]
        ) == pytest.approx(abs(angle))


def test_the_cube_frame_is_where_the_hand_down_reach_puts_the_gripper_tip():
    config = TaskConfig(HEIGHT, WIDTH, seed=3)
    cube = cube_position(config, episode=2)
    lift, elbow, wrist = Chain(HEIGHT, WIDTH).reach_down(
        cube, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS
    )
    tip = ArmDescription().link_poses([0.0, lift, elbow, wrist, 0.0, 0.0])[TIP_LINK][:3, 3]
    frame = cube_transform(cube, HEIGHT, WIDTH)
    assert (frame.parent, frame.child) == (BASE_LINK, CUBE_FRAME)
    np.testing.assert_allclose(tip, frame.translation, atol=1e-9)


def test_without_tf2_msgs_the_guard_says_why_and_gives_no_type(monkeypatch):
    monkeypatch.setitem(sys.modules, "tf2_msgs.msg", None)  # makes the import raise ImportError
    message_type, reason = tf_message_type()
    assert message_type is None
    assert reason.startswith("no /tf or /tf_static: tf2_msgs cannot be imported")


def test_transforms_become_one_stamped_transform_each():
    message_type, reason = tf_message_type()
    if message_type is None:
        pytest.skip(reason)
    moving, fixed = ArmDescription().transforms(HOME_POSE)
    stamp = Time(sec=12, nanosec=34)
    message = tf_message(message_type, moving + fixed, stamp)
    assert [(t.header.frame_id, t.child_frame_id) for t in message.transforms] == [
        (t.parent, t.child) for t in moving + fixed
    ]
    first = message.transforms[1]
    assert first.header.stamp == stamp
    assert (
        first.transform.translation.z,
        first.transform.rotation.y,
        first.transform.rotation.w,
    ) == (moving[1].translation[2], moving[1].rotation[1], moving[1].rotation[3])
