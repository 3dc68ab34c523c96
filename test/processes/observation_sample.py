"""A deterministic Observation with array and image fields, shared by the
publisher process and the test that checks what the subscriber received."""

import array

import cv2
import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.msg import Observation

STATE = np.array([0.5, -1.25, 3.0e-3, 1.0e6, -0.0, 2.5], dtype=np.float32)
PREFIX = np.arange(4 * 6, dtype=np.float32).reshape(4, 6) / 7.0


def red_rgb(height=48, width=64) -> np.ndarray:
    image = np.zeros((height, width, 3), np.uint8)
    image[..., 0] = 255
    return image


def gradient_rgb(height=30, width=40) -> np.ndarray:
    ys, xs = np.mgrid[0:height, 0:width]
    return np.stack([xs * 6 % 256, ys * 8 % 256, (xs + ys) % 256], axis=-1).astype(np.uint8)


def jpeg_bytes() -> bytes:
    # OpenCV encodes BGR; convert so the JPEG decodes to RGB red.
    ok, encoded = cv2.imencode(
        ".jpg", cv2.cvtColor(red_rgb(), cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90]
    )
    assert ok
    return encoded.tobytes()


def build(seq: int) -> Observation:
    msg = Observation()
    msg.schema_version = Observation.CURRENT_SCHEMA_VERSION
    msg.session_id = "session-1"
    msg.client_id = "arm_left"
    msg.seq = seq
    msg.episode = 3
    msg.epoch = 2
    msg.sent_monotonic_ns = 123_456_789_012
    msg.task = "pick the red cube"
    msg.state = array.array("f", STATE.tobytes())
    msg.compressed_camera_names = ["observation.images.front"]
    compressed = CompressedImage(format="jpeg")
    compressed.data = jpeg_bytes()
    msg.compressed_images = [compressed]
    raw_pixels = gradient_rgb()
    raw = Image(
        height=raw_pixels.shape[0],
        width=raw_pixels.shape[1],
        encoding="rgb8",
        step=raw_pixels.shape[1] * 3,
    )
    raw.data = raw_pixels.tobytes()
    msg.raw_camera_names = ["observation.images.wrist"]
    msg.raw_images = [raw]
    msg.inference_delay_steps = 3
    msg.prefix_steps = PREFIX.shape[0]
    msg.prefix_model = array.array("f", PREFIX.tobytes())
    msg.prefix_robot = array.array("f", (PREFIX * 2).tobytes())
    return msg
