"""sim_robot_node as a real process: the three command forms move it, its camera sees it."""

import numpy as np
import pytest
from builtin_interfaces.msg import Duration
from support.ros import spin_until
from sensor_msgs.msg import CompressedImage, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from lerobot_ros import images
from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.sim.so101 import HOME_POSE, SO101_JOINT_NAMES

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
    yield process
    assert stop(process) == 0, log_path.read_text()


def test_sim_robot_follows_every_command_form_and_its_camera_sees_it(sim_robot, ros_node):
    states, frames = [], []
    subscriptions = [
        ros_node.create_subscription(JointState, f"{NAMESPACE}/joint_states", states.append, 10),
        ros_node.create_subscription(CompressedImage, f"{NAMESPACE}/camera/front/image", frames.append, 2),
    ]
    forward = ros_node.create_publisher(Float64MultiArray, f"{NAMESPACE}/forward_position_controller/commands", 10)
    by_name = ros_node.create_publisher(JointState, f"{NAMESPACE}/joint_commands", 10)
    trajectory = ros_node.create_publisher(JointTrajectory, f"{NAMESPACE}/joint_trajectory_controller/joint_trajectory", 10)
    try:
        assert spin_until(ros_node, lambda: states and frames, 30), "no joint_states or camera frames"
        assert list(states[-1].name) == list(SO101_JOINT_NAMES)
        np.testing.assert_allclose(states[-1].position, HOME_POSE, atol=1e-6)
        home_frame = images.compressed_to_rgb(frames[-1])

        def reaches(target):
            return spin_until(ros_node, lambda: np.allclose(states[-1].position, target, atol=0.01), 10)

        spin_until(ros_node, lambda: forward.get_subscription_count() and by_name.get_subscription_count()
                   and trajectory.get_subscription_count(), 5)
        target = np.array([0.3, -0.8, 1.2, 0.5, 0.4, 0.9])
        forward.publish(Float64MultiArray(data=target.tolist()))
        assert reaches(target), f"forward command not tracked: {states[-1].position}"

        target = np.array([-0.3, -0.2, 0.6, 0.1, -0.4, 0.3])
        order = [5, 3, 1, 0, 2, 4]
        by_name.publish(JointState(name=[SO101_JOINT_NAMES[i] for i in order], position=[float(target[i]) for i in order]))
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
