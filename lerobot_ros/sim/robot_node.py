"""sim_robot_node: a simulated arm with cameras, for trying lerobot_ros without hardware.

ROS entities (in the node's namespace):
  joint_states                                sensor_msgs/JointState       (pub, rate_hz)
  <camera_topics[i]>                          sensor_msgs/Image or CompressedImage (pub, camera_rate_hz)
  forward_position_controller/commands        std_msgs/Float64MultiArray   (sub, arm joint order)
  joint_trajectory_controller/joint_trajectory trajectory_msgs/JointTrajectory (sub, by name, timed)
  joint_commands                              sensor_msgs/JointState       (sub, by name)

It accepts the three command forms chunk_executor_node can publish, tracks
the latest one with first-order dynamics under velocity and position
limits, and renders the arm and a target object from fixed viewpoints.
"""

from __future__ import annotations

import sys
import time

from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from lerobot_ros import images
from lerobot_ros.node_support import NodeStartupError, declare_settings, run_node
from lerobot_ros.sim.arm import ArmCamera, ArmConfig, SimulatedArm
from lerobot_ros.sim.command_input import TimedTrajectory, in_joint_order, reorder_by_name
from lerobot_ros.sim.settings import SimRobotSettings

NODE_NAME = "sim_robot"

class SimRobotNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.settings = settings = declare_settings(self, SimRobotSettings)
        self.joint_names = settings.joint_names
        try:
            config = ArmConfig.for_joints(
                self.joint_names, max_velocity=settings.max_velocity, time_constant_s=settings.time_constant_s
            )
        except ValueError as error:
            raise NodeStartupError(str(error)) from error
        self.arm = SimulatedArm(config)
        self.trajectory: TimedTrajectory | None = None
        self.trajectory_started = 0.0
        self.last_step = time.monotonic()
        self.commands_received = 0
        self.commands_refused = 0

        self.joint_state_pub = self.create_publisher(JointState, "joint_states", 10)
        compressed = settings.camera_transport == "compressed"
        self.cameras = []
        for index, topic in enumerate(settings.camera_topics):
            camera = ArmCamera(settings.camera_height, settings.camera_width, settings.seed, viewpoint=index)
            publisher = self.create_publisher(CompressedImage if compressed else Image, topic, 2)
            self.cameras.append((camera, publisher))
        self.create_subscription(Float64MultiArray, "forward_position_controller/commands", self.on_forward_command, 10)
        self.create_subscription(JointTrajectory, "joint_trajectory_controller/joint_trajectory", self.on_trajectory, 10)
        self.create_subscription(JointState, "joint_commands", self.on_joint_command, 10)
        self.create_timer(1.0 / settings.rate_hz, self.on_step)
        if self.cameras:
            self.create_timer(1.0 / settings.camera_rate_hz, self.on_camera)
        self.get_logger().info(
            f"simulating {len(self.joint_names)} joints at {settings.rate_hz:g} Hz with "
            f"{len(self.cameras)} {settings.camera_transport} camera(s)"
        )

    def _accept(self, positions) -> None:
        self.trajectory = None
        self.arm.command(positions)
        self.commands_received += 1

    def _refuse(self, error: Exception) -> None:
        self.commands_refused += 1
        self.get_logger().warning(f"command refused: {error}", throttle_duration_sec=1.0)

    def on_forward_command(self, msg: Float64MultiArray) -> None:
        try:
            self._accept(in_joint_order(msg.data, self.joint_names))
        except ValueError as error:
            self._refuse(error)

    def on_joint_command(self, msg: JointState) -> None:
        try:
            self._accept(reorder_by_name(msg.name, msg.position, self.joint_names))
        except ValueError as error:
            self._refuse(error)

    def on_trajectory(self, msg: JointTrajectory) -> None:
        try:
            times = [point.time_from_start.sec + point.time_from_start.nanosec * 1e-9 for point in msg.points]
            positions = [reorder_by_name(msg.joint_names, point.positions, self.joint_names) for point in msg.points]
            self.trajectory = TimedTrajectory(self.arm.position.copy(), times, positions)
            self.trajectory_started = time.monotonic()
            self.commands_received += 1
        except ValueError as error:
            self._refuse(error)

    def on_step(self) -> None:
        now = time.monotonic()
        dt, self.last_step = min(now - self.last_step, 0.1), now
        if self.trajectory is not None:
            self.arm.command(self.trajectory.target_at(now - self.trajectory_started))
        self.arm.step(dt)
        msg = JointState(name=list(self.joint_names))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.position = self.arm.position.tolist()
        msg.velocity = self.arm.velocity.tolist()
        self.joint_state_pub.publish(msg)

    def on_camera(self) -> None:
        stamp = self.get_clock().now().to_msg()
        for index, (camera, publisher) in enumerate(self.cameras):
            rgb = camera.render(self.arm.position)
            if self.settings.camera_transport == "compressed":
                msg = images.rgb_to_compressed(rgb, self.settings.jpeg_quality)
            else:
                msg = images.rgb_to_raw(rgb)
            msg.header.stamp = stamp
            msg.header.frame_id = f"sim_camera_{index}"
            publisher.publish(msg)


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(SimRobotNode, args))


if __name__ == "__main__":
    main()
