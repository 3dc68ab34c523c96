"""sim_robot_node as a real process: the three command forms move it, its camera sees it, rviz can
draw it."""

from xml.etree import ElementTree

import numpy as np
import pytest
from builtin_interfaces.msg import Duration
from sensor_msgs.msg import CompressedImage, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.protocol.qos import LATCHED_QOS, TF_QOS
from lerobot_ros.protocol.wire import images
from lerobot_ros.sim.description import CUBE_FRAME, ArmDescription
from lerobot_ros.sim.so101 import HOME_POSE, SO101_JOINT_NAMES
from lerobot_ros.sim.tf_messages import tf_message_type
from support.ros import spin_until

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_sim_robot_node")

NAMESPACE = "/sim_test"


@pytest.fixture(scope="module")
def sim_robot(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("sim") / "sim_robot.log"
    with log_path.open("w") as log:
        process = spawn_node(
            "lerobot_ros.sim.robot_node",
            {"camera_transport": "compressed", "camera_topics": ["camera/front/image"]},
            log=log,
            namespace=NAMESPACE,
        )
    yield process, log_path
    assert stop(process) == 0, log_path.read_text()


def test_sim_robot_follows_every_command_form_and_its_camera_sees_it(sim_robot, ros_node):
    states, frames = [], []
    subscriptions = [
        ros_node.create_subscription(JointState, f"{NAMESPACE}/joint_states", states.append, 10),
        ros_node.create_subscription(
            CompressedImage, f"{NAMESPACE}/camera/front/image", frames.append, 2
        ),
    ]
    forward = ros_node.create_publisher(
        Float64MultiArray, f"{NAMESPACE}/forward_position_controller/commands", 10
    )
    by_name = ros_node.create_publisher(JointState, f"{NAMESPACE}/joint_commands", 10)
    trajectory = ros_node.create_publisher(
        JointTrajectory, f"{NAMESPACE}/joint_trajectory_controller/joint_trajectory", 10
    )
    try:
        assert spin_until(ros_node, lambda: states and frames, 30), (
            "no joint_states or camera frames"
        )
        assert list(states[-1].name) == list(SO101_JOINT_NAMES)
        np.testing.assert_allclose(states[-1].position, HOME_POSE, atol=1e-6)
        home_frame = images.compressed_to_rgb(frames[-1])

        def reaches(target):
            return spin_until(
                ros_node, lambda: np.allclose(states[-1].position, target, atol=0.01), 10
            )

        spin_until(
            ros_node,
            lambda: (
                forward.get_subscription_count()
                and by_name.get_subscription_count()
                and trajectory.get_subscription_count()
            ),
            5,
        )
        target = np.array([0.3, -0.8, 1.2, 0.5, 0.4, 0.9])
        forward.publish(Float64MultiArray(data=target.tolist()))
        assert reaches(target), f"forward command not tracked: {states[-1].position}"

        target = np.array([-0.3, -0.2, 0.6, 0.1, -0.4, 0.3])
        order = [5, 3, 1, 0, 2, 4]
        by_name.publish(
            JointState(
                name=[SO101_JOINT_NAMES[i] for i in order],
                position=[float(target[i]) for i in order],
            )
        )
        assert reaches(target), f"JointState command not mapped by name: {states[-1].position}"

        final = np.array([0.1, -0.5, 0.9, 0.2, 0.0, 0.6])
        msg = JointTrajectory(joint_names=list(SO101_JOINT_NAMES))
        for step in range(1, 4):
            point = JointTrajectoryPoint(positions=(target + (final - target) * step / 3).tolist())
            point.time_from_start = Duration(sec=0, nanosec=100_000_000 * step)
            msg.points.append(point)
        trajectory.publish(msg)
        assert reaches(final), f"trajectory not followed: {states[-1].position}"

        frames.clear()
        assert spin_until(ros_node, lambda: frames, 5)
        moved_frame = images.compressed_to_rgb(frames[-1])
        assert np.abs(home_frame.astype(int) - moved_frame.astype(int)).mean() > 1.0
    finally:
        for subscription in subscriptions:
            ros_node.destroy_subscription(subscription)
        for publisher in (forward, by_name, trajectory):
            ros_node.destroy_publisher(publisher)


def test_a_late_subscriber_gets_the_urdf_and_tf_carries_each_link_at_the_published_joint_state(
    sim_robot, ros_node
):
    descriptions, states, tf, tf_static = [], [], [], []
    subscriptions = [
        ros_node.create_subscription(
            String, f"{NAMESPACE}/robot_description", descriptions.append, LATCHED_QOS
        ),
        ros_node.create_subscription(JointState, f"{NAMESPACE}/joint_states", states.append, 10),
    ]
    message_type, no_tf = tf_message_type()
    if message_type is not None:
        subscriptions += [
            ros_node.create_subscription(message_type, "/tf", tf.append, TF_QOS),
            ros_node.create_subscription(
                message_type, "/tf_static", tf_static.append, LATCHED_QOS
            ),
        ]
    forward = ros_node.create_publisher(
        Float64MultiArray, f"{NAMESPACE}/forward_position_controller/commands", 10
    )
    try:
        # The node has been publishing for a while (the module's first test): only transient local
        # delivers it now.
        assert spin_until(ros_node, lambda: descriptions and states, 15), (
            "no robot_description for a late subscriber"
        )
        robot = ElementTree.fromstring(descriptions[-1].data)
        revolute = [
            joint.get("name")
            for joint in robot.findall("joint")
            if joint.get("type") == "revolute"
        ]
        assert revolute == list(states[-1].name) == list(SO101_JOINT_NAMES)
        if message_type is None:
            process, log_path = sim_robot
            assert no_tf in log_path.read_text()
            pytest.skip(no_tf)

        assert spin_until(ros_node, lambda: forward.get_subscription_count(), 5)
        target = np.array([0.4, -0.6, 1.0, 0.3, -0.5, 0.7])
        forward.publish(Float64MultiArray(data=target.tolist()))
        assert spin_until(
            ros_node, lambda: np.allclose(states[-1].position, target, atol=0.01), 10
        )
        description = ArmDescription()
        fixed = description.transforms(HOME_POSE)[1]
        by_stamp = {
            (state.header.stamp.sec, state.header.stamp.nanosec): state for state in states[-20:]
        }

        def paired():
            return [
                (message, by_stamp[stamp])
                for message in tf[-20:]
                if (
                    stamp := (
                        message.transforms[0].header.stamp.sec,
                        message.transforms[0].header.stamp.nanosec,
                    )
                )
                in by_stamp
            ]

        assert spin_until(ros_node, lambda: paired() and tf_static, 5), (
            "no /tf at a published joint state, or no /tf_static"
        )
        message, state = paired()[-1]
        expected = description.transforms(state.position)[0]
        frames = [(t.header.frame_id, t.child_frame_id) for t in message.transforms]
        assert frames == [(t.parent, t.child) for t in expected] + [("base_link", CUBE_FRAME)]
        for sent, want in zip(message.transforms, expected, strict=False):
            r, x = sent.transform.rotation, sent.transform.translation
            np.testing.assert_allclose(
                [r.x, r.y, r.z, r.w, x.x, x.y, x.z],
                [*want.rotation, *want.translation],
                atol=1e-12,
            )
        static = [(t.header.frame_id, t.child_frame_id) for t in tf_static[-1].transforms]
        assert static == [(t.parent, t.child) for t in fixed]
        # Every link but the base is a child exactly once across /tf and /tf_static.
        children = [child for _, child in frames[:-1] + static]
        assert sorted(children) == sorted(
            link.get("name") for link in robot.findall("link") if link.get("name") != "base_link"
        )
    finally:
        for subscription in subscriptions:
            ros_node.destroy_subscription(subscription)
        ros_node.destroy_publisher(forward)
