"""sim_robot_node: a simulated arm with cameras, for trying lerobot_ros without hardware.

ROS entities (in the node's namespace):
  joint_states            sensor_msgs/JointState (pub, rate_hz)
  <camera_topics[i]>      sensor_msgs/Image or CompressedImage (pub, camera_rate_hz)
  <sim_topic of every output mode>
                          that mode's message (sub), e.g. forward_position_controller/commands
                          std_msgs/Float64MultiArray; see lerobot_ros.protocol.wire.output_modes
  ~/status                lerobot_ros/TaskStatus (pub, 10 Hz and at every episode start/end)
  forward_position_controller/commands
                          (pub, 30 Hz, only with ``expert``: the scripted expert's commands)
  robot_description       std_msgs/String (pub once, transient local: the arm's URDF)
  /tf                     tf2_msgs/TFMessage (pub, rate_hz: the moving links and the cube)
  /tf_static              tf2_msgs/TFMessage (pub once, transient local: the fixed links)

It accepts every command form chunk_executor_node can publish, tracks the
latest one with first-order dynamics under velocity and position limits
(``command_input.CommandFollower``), and renders the arm and a target object
from fixed viewpoints.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import String

from lerobot_ros.msg import TaskStatus
from lerobot_ros.node_shell.node_support import NodeStartupError, declare_settings, run_node
from lerobot_ros.protocol.qos import COMMAND_QOS, LATCHED_QOS, STATUS_QOS, TF_QOS
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.output_modes import OUTPUT_MODES, OutputMode
from lerobot_ros.sim.arm import ArmCamera, ArmConfig, SimulatedArm
from lerobot_ros.sim.command_input import CommandFollower
from lerobot_ros.sim.description import ArmDescription, cube_transform
from lerobot_ros.sim.expert import ExpertPlan
from lerobot_ros.sim.settings import SimRobotSettings
from lerobot_ros.sim.task import TASK_DESCRIPTION, Phase, ReachTask, TaskConfig
from lerobot_ros.sim.tf_messages import tf_message, tf_message_type

NODE_NAME = "sim_robot"
STATUS_PERIOD_S = 0.1
EXPERT_RATE_HZ = 30.0
EXPERT_MODE = OUTPUT_MODES["forward_command"]


class SimRobotNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.settings = settings = declare_settings(self, SimRobotSettings)
        self.joint_names = settings.joint_names
        self._build_simulation(settings)
        self._create_sensor_publishers(settings)
        for mode in OUTPUT_MODES.values():
            self.create_subscription(
                mode.message_type,
                mode.sim_topic,
                lambda msg, mode=mode: self.on_command(mode, msg),
                10,
            )
        self.status_pub = self.create_publisher(TaskStatus, "~/status", STATUS_QOS)
        self._publish_description()
        self.create_timer(1.0 / settings.rate_hz, self.on_step)
        self.create_timer(STATUS_PERIOD_S, self.publish_status)
        if self.cameras:
            self.create_timer(1.0 / settings.camera_rate_hz, self.on_camera)
        if self.expert_plan is not None:
            self.expert_pub = self.create_publisher(
                EXPERT_MODE.message_type, EXPERT_MODE.sim_topic, COMMAND_QOS
            )
            self.create_timer(1.0 / EXPERT_RATE_HZ, self.on_expert)
        self.get_logger().info(
            f"simulating {len(self.joint_names)} joints at {settings.rate_hz:g} Hz with "
            f"{len(self.cameras)} {settings.camera_transport} camera(s); task: {TASK_DESCRIPTION}"
            + (" (scripted expert driving)" if self.expert_plan is not None else "")
        )

    def _build_simulation(self, settings: SimRobotSettings) -> None:
        """The arm, its command follower, its description and the task; any inconsistency stops
        start-up."""
        try:
            config = ArmConfig.for_joints(
                self.joint_names,
                max_velocity=settings.max_velocity,
                time_constant_s=settings.time_constant_s,
            )
            task_config = TaskConfig(
                settings.camera_height,
                settings.camera_width,
                settings.seed,
                settings.task_timeout_s,
                settings.task_reset_delay_s,
                settings.task_success_radius,
            )
        except ValueError as error:
            raise NodeStartupError(str(error)) from error
        if len(self.joint_names) != 6:
            raise NodeStartupError(
                "the reach task needs the 6 SO-101 style joints; joint_names has "
                f"{len(self.joint_names)}"
            )
        try:
            self.description = ArmDescription.for_arm(config)
        except ValueError as error:
            raise NodeStartupError(str(error)) from error
        self.arm = SimulatedArm(config)
        self.follower = CommandFollower(self.arm)
        self.last_step = time.monotonic()
        self.task = ReachTask(task_config, self.last_step)
        self.outcomes = {Phase.SUCCESS: 0, Phase.FAILURE: 0}
        self.expert_rng = np.random.default_rng([settings.seed, 1])
        self.expert_plan = self._plan_expert() if settings.expert else None
        self.commands_received = 0
        self.commands_refused = 0

    def _create_sensor_publishers(self, settings: SimRobotSettings) -> None:
        self.joint_state_pub = self.create_publisher(JointState, "joint_states", 10)
        compressed = settings.camera_transport == "compressed"
        self.cameras = []
        for index, topic in enumerate(settings.camera_topics):
            camera = ArmCamera(
                settings.camera_height, settings.camera_width, settings.seed, viewpoint=index
            )
            publisher = self.create_publisher(CompressedImage if compressed else Image, topic, 2)
            self.cameras.append((camera, publisher))

    def _publish_description(self) -> None:
        """The URDF and the fixed links, latched; /tf only where tf2_msgs is installed."""
        self.create_publisher(String, "robot_description", LATCHED_QOS).publish(
            String(data=self.description.urdf())
        )
        self.tf_message_type, no_tf = tf_message_type()
        if self.tf_message_type is None:
            self.get_logger().info(no_tf)
            return
        self.tf_pub = self.create_publisher(self.tf_message_type, "/tf", TF_QOS)
        fixed = self.description.transforms(self.arm.position)[1]
        self.create_publisher(self.tf_message_type, "/tf_static", LATCHED_QOS).publish(
            tf_message(self.tf_message_type, fixed, self.get_clock().now().to_msg())
        )

    def _plan_expert(self) -> ExpertPlan:
        return ExpertPlan(
            self.task.config,
            self.arm.position,
            self.task.cube,
            self.expert_rng,
            self.settings.expert_noise,
        )

    def on_command(self, mode: OutputMode, msg) -> None:
        try:
            self.follower.follow(mode.read(msg, self.joint_names), time.monotonic())
        except ValueError as error:
            self.commands_refused += 1
            self.get_logger().warning(
                f"{mode.name} command refused: {error}", throttle_duration_sec=1.0
            )
            return
        self.commands_received += 1

    def on_step(self) -> None:
        now = time.monotonic()
        dt, self.last_step = min(now - self.last_step, 0.1), now
        self.follower.step(now, dt)
        phase = self.task.phase
        if self.task.update(self.arm.position, now):
            self.follower.reset()  # a new episode starts from the home pose
            if self.expert_plan is not None:
                self.expert_plan = self._plan_expert()
            self.publish_status()
        elif self.task.phase is not phase:
            self.outcomes[self.task.phase] += 1
            self.publish_status()
        msg = JointState(name=list(self.joint_names))
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.position = self.arm.position.tolist()
        msg.velocity = self.arm.velocity.tolist()
        self.joint_state_pub.publish(msg)
        if self.tf_message_type is not None:
            moving = self.description.transforms(self.arm.position)[0]
            cube = cube_transform(self.task.cube, self.task.config.height, self.task.config.width)
            self.tf_pub.publish(
                tf_message(self.tf_message_type, [*moving, cube], msg.header.stamp)
            )

    def on_expert(self) -> None:
        elapsed = self.task.status(time.monotonic()).elapsed_s
        self.expert_pub.publish(
            EXPERT_MODE.build(
                self.joint_names, self.expert_plan.command_at(elapsed), 1.0 / EXPERT_RATE_HZ
            )
        )

    def publish_status(self) -> None:
        status = self.task.status(time.monotonic())
        msg = TaskStatus(
            task=TASK_DESCRIPTION,
            episode=status.episode,
            phase=status.phase.value,
            elapsed_s=status.elapsed_s,
            distance_px=status.distance,
            cube_px=list(status.cube),
            expert_active=self.expert_plan is not None,
            successes=self.outcomes[Phase.SUCCESS],
            failures=self.outcomes[Phase.FAILURE],
        )
        msg.header.stamp = self.get_clock().now().to_msg()
        self.status_pub.publish(msg)

    def on_camera(self) -> None:
        stamp = self.get_clock().now().to_msg()
        for index, (camera, publisher) in enumerate(self.cameras):
            rgb = camera.render(self.arm.position, self.task.cube)
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
