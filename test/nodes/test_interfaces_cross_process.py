"""The generated interfaces work across real OS processes over a real RMW."""

import hashlib
import json
import subprocess
import sys

import numpy as np

from lerobot_ros.protocol.contract import SCHEMA_VERSION
from support.paths import PROCESSES

sys.path.insert(0, str(PROCESSES))
import observation_sample  # noqa: E402


def test_observation_crosses_processes_with_arrays_and_images_intact():
    topic = "/lerobot_test/observation"
    subscriber = subprocess.Popen(
        [sys.executable, str(PROCESSES / "observation_subscriber.py"), topic, "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert subscriber.stdout.readline().strip() == "subscribed"
    publisher = subprocess.Popen(
        [sys.executable, str(PROCESSES / "observation_publisher.py"), topic, "60"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = subscriber.communicate(timeout=90)
    finally:
        publisher.terminate()
        publisher.wait(timeout=15)
    assert subscriber.returncode == 0, f"subscriber failed: {out}\n{err}"
    got = json.loads(out.strip().splitlines()[-1])

    assert got["seq"] >= 1
    assert got["identity"] == [
        SCHEMA_VERSION,
        "session-1",
        "arm_left",
        3,
        2,
        123_456_789_012,
        "pick the red cube",
    ]
    assert got["state_type"] == "array"  # float32[] arrives as array.array: np.frombuffer views it
    np.testing.assert_array_equal(np.array(got["state"], np.float32), observation_sample.STATE)
    assert got["compressed_camera_names"] == ["observation.images.front"]
    assert got["jpeg_format"] == "jpeg"
    assert got["jpeg_sha256"] == hashlib.sha256(observation_sample.jpeg_bytes()).hexdigest()
    red, green, blue = got["jpeg_mean_rgb"]
    assert red > 250 and green < 5 and blue < 5, "a red image must still be red after the trip"
    raw = observation_sample.gradient_rgb()
    assert got["raw_camera_names"] == ["observation.images.wrist"]
    assert got["raw_shape_encoding"] == [raw.shape[0], raw.shape[1], raw.shape[1] * 3, "rgb8"]
    assert got["raw_sha256"] == hashlib.sha256(raw.tobytes()).hexdigest()
    assert got["rtc"] == [3, 4]
    np.testing.assert_array_equal(
        np.array(got["prefix_model"], np.float32), observation_sample.PREFIX.ravel()
    )
    np.testing.assert_array_equal(
        np.array(got["prefix_robot"], np.float32), (observation_sample.PREFIX * 2).ravel()
    )
