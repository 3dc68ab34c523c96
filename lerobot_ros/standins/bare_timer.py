"""Stands in for an ideal chunk_executor_node: a bare rclpy wall timer publishing the executor's
command message.

One node, the default SingleThreadedExecutor, one timer at --fps that
publishes a std_msgs/Float64MultiArray of six values (what
chunk_executor_node publishes in forward_command mode) on --topic with the
executor's command QoS: the baseline the executor's own command jitter is
compared with.

Invariant: nothing else runs in the process, so the period seen by a
subscriber is rclpy's timer + one DDS hop, nothing more.

usage: python -m lerobot_ros.standins.bare_timer --topic /t/bare_commands --fps 100 [--run-s 120]
"""

import argparse

import rclpy
from std_msgs.msg import Float64MultiArray

from lerobot_ros.protocol.qos import COMMAND_QOS
from lerobot_ros.standins.bounded_spin import spin_then_exit


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--fps", type=float, required=True)
    parser.add_argument("--run-s", type=float, default=300.0)
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node("bare_timer")
    publisher = node.create_publisher(Float64MultiArray, args.topic, COMMAND_QOS)
    msg = Float64MultiArray(data=[0.11, -0.52, 0.83, 0.34, -0.05, 0.26])
    node.create_timer(1.0 / args.fps, lambda: publisher.publish(msg))
    spin_then_exit(node, args.run_s)


if __name__ == "__main__":
    main()
