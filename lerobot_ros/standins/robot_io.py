"""Stands in for a robot's driver, the hardware boundary, as the executor sees it.

Publishes sensor_msgs/JointState with the SO-101 joint names IN A SHUFFLED
ORDER (the executor must map by name) and one 96x128 camera on Image (rgb8)
or CompressedImage (JPEG) at 30 Hz. Subscribes to command topics of the
three output modes and appends every command it receives to a JSON-lines
file: {"t": monotonic seconds, "t_received", "topic", "names", "values"}.
"t" is when this process's callback ran; "t_received" when the middleware
received the message (its reception stamp, on the monotonic clock): what a
driver sees, without this Python driver's own spin lag.

Invariant: every command that arrives is recorded: the command
subscriptions are reliable and keep 100, so a callback running late loses
nothing (a ros2_control controller's subscription queues too). The joints
stand still at fixed positions (given in SO-101 order), so "hold" is
recognisable.

usage: python -m lerobot_ros.standins.robot_io --prefix /t1 --out commands.jsonl
           [--transport raw|compressed] [--command forward_command:/t1/cmd] ... [--run-s 120]
"""

import argparse
import json
import time

import numpy as np
import rclpy
from rclpy.qos import QoSProfile
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from lerobot_ros.protocol.clocks import received_monotonic_s
from lerobot_ros.protocol.qos import COMMAND_QOS, SENSOR_QOS
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.output_modes import OUTPUT_MODES
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from lerobot_ros.standins.bounded_spin import spin_then_exit

#: Measured positions in SO-101 order (distinct, so a mis-mapping shows).
POSITIONS = (0.11, -0.52, 0.83, 0.34, -0.05, 0.26)
#: The order the driver publishes them in.
SHUFFLED = (3, 0, 5, 1, 4, 2)


def command_values(msg) -> tuple[list[str], list]:
    """The names and values as the message carries them: the tests check the order the executor
    chose."""
    if isinstance(msg, Float64MultiArray):
        return [], list(msg.data)
    if isinstance(msg, JointTrajectory):
        return list(msg.joint_names), [list(point.positions) for point in msg.points]
    return list(msg.name), list(msg.position)


#: The commands' QoS (reliable), with a queue: this driver's spin running late must not drop what
#: arrived.
RECORDING_QOS = QoSProfile(
    depth=100, reliability=COMMAND_QOS.reliability, durability=COMMAND_QOS.durability
)


def recorder(out, kind: str, topic: str):
    """The subscription callback writing one JSON line per command (two parameters: rclpy passes
    the info)."""

    def record(msg, info):
        names, values = command_values(msg)
        extra = {}
        if isinstance(msg, JointTrajectory):
            extra["time_from_start"] = [
                p.time_from_start.sec + p.time_from_start.nanosec * 1e-9 for p in msg.points
            ]
        now = time.monotonic()
        received = received_monotonic_s(info, time.time_ns(), now)
        out.write(
            json.dumps(
                {
                    "t": now,
                    "t_received": received,
                    "topic": topic,
                    "kind": kind,
                    "names": names,
                    "values": values,
                    **extra,
                }
            )
            + "\n"
        )

    return record


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--transport", default="compressed", choices=["raw", "compressed"])
    parser.add_argument("--command", action="append", default=[], help="mode:topic")
    parser.add_argument("--run-s", type=float, default=300.0)
    args = parser.parse_args()

    rclpy.init()
    node = rclpy.create_node("robot_io_" + args.prefix.strip("/").replace("/", "_"))
    joint_pub = node.create_publisher(JointState, f"{args.prefix}/joint_states", SENSOR_QOS)
    camera_type = Image if args.transport == "raw" else CompressedImage
    camera_pub = node.create_publisher(camera_type, f"{args.prefix}/camera", SENSOR_QOS)
    out = open(args.out, "a", buffering=1)
    for spec in args.command:
        kind, topic = spec.split(":", 1)
        node.create_subscription(
            OUTPUT_MODES[kind].message_type, topic, recorder(out, kind, topic), RECORDING_QOS
        )

    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 255, (96, 128, 3), dtype=np.uint8)
    frame = (
        images.rgb_to_raw(rgb) if args.transport == "raw" else images.rgb_to_compressed(rgb, 90)
    )
    state = JointState()
    state.name = [SO101_JOINT_NAMES[i] for i in SHUFFLED]
    state.position = [POSITIONS[i] for i in SHUFFLED]
    state.velocity = [0.01 * (i + 1) for i in SHUFFLED]

    def publish() -> None:
        stamp = node.get_clock().now().to_msg()
        state.header.stamp = frame.header.stamp = stamp
        joint_pub.publish(state)
        camera_pub.publish(frame)

    node.create_timer(1 / 30, publish)
    spin_then_exit(node, args.run_s, on_exit=out.close)


if __name__ == "__main__":
    main()
