"""Publish the sample Observation on a topic every 50 ms (bounded run time)."""

import sys
import time

import rclpy

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from observation_sample import build  # noqa: E402

from lerobot_ros.msg import Observation  # noqa: E402


def main() -> None:
    topic, run_s = sys.argv[1], float(sys.argv[2])
    rclpy.init()
    node = rclpy.create_node("observation_publisher")
    publisher = node.create_publisher(Observation, topic, 10)
    deadline = time.monotonic() + run_s
    seq = 0
    try:
        while time.monotonic() < deadline:
            seq += 1
            publisher.publish(build(seq))
            rclpy.spin_once(node, timeout_sec=0.05)
    except KeyboardInterrupt:
        pass
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()
