"""Stands in for a robot's camera drivers, as the executor sees them: N cameras of one size at a
frame rate.

Publishes one textured frame per camera topic as raw rgb8
sensor_msgs/Image (what a USB camera driver publishes) or as a JPEG
CompressedImage, at --fps with the sensor QoS.

Invariant: the frames are made once; each tick only restamps and publishes
them, so encoding never slows the rate the executor is measured at.

usage: python -m lerobot_ros.standins.camera_publisher --topic /t/cam0 [--topic /t/cam1]
           [--height 480 --width 640] [--transport raw|compressed] [--fps 30] [--run-s 120]
"""

import argparse

import numpy as np
import rclpy
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.protocol.qos import SENSOR_QOS
from lerobot_ros.protocol.wire import images
from lerobot_ros.standins.bounded_spin import spin_then_exit


def scene(height: int, width: int, seed: int) -> np.ndarray:
    """A gradient with noise: a flat frame would compress far better than a camera's, and JPEG
    sizes would lie."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1
    )
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--topic", action="append", required=True)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--transport", default="raw", choices=["raw", "compressed"])
    parser.add_argument("--fps", type=float, default=30.0)
    parser.add_argument("--run-s", type=float, default=300.0)
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node("camera_publisher")
    kind = Image if args.transport == "raw" else CompressedImage
    encode = (
        images.rgb_to_raw
        if args.transport == "raw"
        else (lambda rgb: images.rgb_to_compressed(rgb, 90))
    )
    cameras = [
        (
            node.create_publisher(kind, topic, SENSOR_QOS),
            encode(scene(args.height, args.width, seed)),
        )
        for seed, topic in enumerate(args.topic)
    ]

    def publish() -> None:
        stamp = node.get_clock().now().to_msg()
        for publisher, frame in cameras:
            frame.header.stamp = stamp
            publisher.publish(frame)

    node.create_timer(1.0 / args.fps, publish)
    spin_then_exit(node, args.run_s)


if __name__ == "__main__":
    main()
