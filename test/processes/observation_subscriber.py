"""Receive one Observation and print what arrived as JSON (bounded wait)."""

import hashlib
import json
import sys
import time

import cv2
import numpy as np
import rclpy

from lerobot_ros.msg import Observation


def describe(msg: Observation) -> dict:
    jpeg = bytes(msg.compressed_images[0].data)
    decoded_rgb = cv2.cvtColor(
        cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB
    )
    raw = msg.raw_images[0]
    return {
        "seq": msg.seq,
        "identity": [
            msg.schema_version,
            msg.session_id,
            msg.client_id,
            msg.episode,
            msg.epoch,
            msg.sent_monotonic_ns,
            msg.task,
        ],
        "state": np.frombuffer(msg.state, np.float32).tolist(),
        "state_type": type(msg.state).__name__,
        "compressed_camera_names": list(msg.compressed_camera_names),
        "jpeg_sha256": hashlib.sha256(jpeg).hexdigest(),
        "jpeg_format": msg.compressed_images[0].format,
        "jpeg_mean_rgb": decoded_rgb.reshape(-1, 3).mean(axis=0).tolist(),
        "raw_camera_names": list(msg.raw_camera_names),
        "raw_shape_encoding": [raw.height, raw.width, raw.step, raw.encoding],
        "raw_sha256": hashlib.sha256(bytes(raw.data)).hexdigest(),
        "rtc": [msg.inference_delay_steps, msg.prefix_steps],
        "prefix_model": np.frombuffer(msg.prefix_model, np.float32).tolist(),
        "prefix_robot": np.frombuffer(msg.prefix_robot, np.float32).tolist(),
    }


def main() -> None:
    topic, timeout_s = sys.argv[1], float(sys.argv[2])
    rclpy.init()
    node = rclpy.create_node("observation_subscriber")
    received = []
    node.create_subscription(Observation, topic, received.append, 10)
    print("subscribed", flush=True)
    deadline = time.monotonic() + timeout_s
    while not received and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.try_shutdown()
    if not received:
        print(
            json.dumps({"error": f"nothing received on {topic} within {timeout_s} s"}), flush=True
        )
        sys.exit(1)
    print(json.dumps(describe(received[0])), flush=True)


if __name__ == "__main__":
    main()
