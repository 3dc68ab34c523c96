"""sim_robot_node: a simulated arm with cameras, for trying lerobot_ros without hardware.

ROS entities (in the node's namespace):
  joint_states                                sensor_msgs/JointState       (pub, rate_hz)
  <camera_topics[i]>                          sensor_msgs/Image or CompressedImage (pub, camera_rate_hz)
  <sim_topic of every output mode>            that mode's message (sub), e.g. forward_position_controller/commands
                                              std_msgs/Float64MultiArray; see lerobot_ros.output_modes

It accepts every command form chunk_executor_node can publish, tracks the
latest one with first-order dynamics under velocity and position limits
(``command_input.CommandFollower``), and renders the arm and a target object
from fixed viewpoints.
"""

from __future__ import annotations

import sys
import time

from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState

from lerobot_ros import images
from lerobot_ros.node_support import NodeStartupError, ParameterSpec, declare_validated, declared_strings, run_node
from lerobot_ros.output_modes import OUTPUT_MODES, OutputMode
from lerobot_ros.sim.arm import ArmCamera, ArmConfig, SimulatedArm
from lerobot_ros.sim.command_input import CommandFollower
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, SO101_JOINT_NAMES

NODE_NAME = "sim_robot"

PARAMETERS = (
    ParameterSpec("joint_names", list(SO101_JOINT_NAMES), "Joint names of the simulated arm, in its order"),
    ParameterSpec("rate_hz", 100.0, "Simulation step and joint_states publishing rate (Hz)"),
    ParameterSpec("max_velocity", 3.0, "Velocity limit of every joint (rad/s)"),
    ParameterSpec("time_constant_s", 0.05, "First-order tracking lag of the joints (seconds)"),
    ParameterSpec("camera_topics", ["camera/front/image_raw"], "One topic per simulated camera (viewpoints alternate sides)"),
    ParameterSpec("camera_transport", "raw", "raw (sensor_msgs/Image rgb8) or compressed (CompressedImage JPEG)"),
    ParameterSpec("camera_height", DEFAULT_IMAGE_SHAPE[0], "Rendered image height (pixels)"),
    ParameterSpec("camera_width", DEFAULT_IMAGE_SHAPE[1], "Rendered image width (pixels)"),
    ParameterSpec("camera_rate_hz", 30.0, "Camera publishing rate (Hz)"),
    ParameterSpec("jpeg_quality", 90, "JPEG quality of compressed camera topics (1-100)"),
    ParameterSpec("seed", 0, "Seed of the scene (target object placement and texture)"),
)


def parameter_problems(params: dict) -> list[str]:
    problems = []
    for name in ("rate_hz", "camera_rate_hz", "max_velocity", "time_constant_s"):
        if params[name] <= 0:
            problems.append(f"'{name}' is {params[name]}, expected more than 0")
    if params["camera_transport"] not in ("raw", "compressed"):
        problems.append(f"'camera_transport' is {params['camera_transport']!r}, expected 'raw' or 'compressed'")
    if not 1 <= params["jpeg_quality"] <= 100:
        problems.append(f"'jpeg_quality' is {params['jpeg_quality']}, expected 1..100")
    if not declared_strings(params["joint_names"]):
        problems.append("'joint_names' is empty")
    return problems


class SimRobotNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.params = declare_validated(self, PARAMETERS, parameter_problems)
        self.joint_names = declared_strings(self.params["joint_names"])
        try:
            config = ArmConfig.for_joints(
                self.joint_names, max_velocity=self.params["max_velocity"], time_constant_s=self.params["time_constant_s"]
            )
        except ValueError as error:
            raise NodeStartupError(str(error)) from error
        self.arm = SimulatedArm(config)
        self.follower = CommandFollower(self.arm)
        self.last_step = time.monotonic()
        self.commands_received = 0
        self.commands_refused = 0

        self.joint_state_pub = self.create_publisher(JointState, "joint_states", 10)
        compressed = self.params["camera_transport"] == "compressed"
        self.cameras = []
        for index, topic in enumerate(declared_strings(self.params["camera_topics"])):
            camera = ArmCamera(self.params["camera_height"], self.params["camera_width"], self.params["seed"], viewpoint=index)
            publisher = self.create_publisher(CompressedImage if compressed else Image, topic, 2)
            self.cameras.append((camera, publisher))
        for mode in OUTPUT_MODES.values():
            self.create_subscription(mode.message_type, mode.sim_topic, lambda msg, mode=mode: self.on_command(mode, msg), 10)
        self.create_timer(1.0 / self.params["rate_hz"], self.on_step)
        if self.cameras:
            self.create_timer(1.0 / self.params["camera_rate_hz"], self.on_camera)
        self.get_logger().info(
            f"simulating {len(self.joint_names)} joints at {self.params['rate_hz']:g} Hz with "
            f"{len(self.cameras)} {self.params['camera_transport']} camera(s)"
        )

    def on_command(self, mode: OutputMode, msg) -> None:
        try:
            self.follower.follow(mode.read(msg, self.joint_names), time.monotonic())
        except ValueError as error:
            self.commands_refused += 1
            self.get_logger().warning(f"{mode.name} command refused: {error}", throttle_duration_sec=1.0)
            return
        self.commands_received += 1

    def on_step(self) -> None:
        now = time.monotonic()
        dt, self.last_step = min(now - self.last_step, 0.1), now
        self.follower.step(now, dt)
        msg = JointState(name=list(self.joint_names))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.position = self.arm.position.tolist()
        msg.velocity = self.arm.velocity.tolist()
        self.joint_state_pub.publish(msg)

    def on_camera(self) -> None:
        stamp = self.get_clock().now().to_msg()
        for index, (camera, publisher) in enumerate(self.cameras):
            rgb = camera.render(self.arm.position)
            if self.params["camera_transport"] == "compressed":
                msg = images.rgb_to_compressed(rgb, self.params["jpeg_quality"])
            else:
                msg = images.rgb_to_raw(rgb)
            msg.header.stamp = stamp
            msg.header.frame_id = f"sim_camera_{index}"
            publisher.publish(msg)


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(SimRobotNode, args))


if __name__ == "__main__":
    main()
