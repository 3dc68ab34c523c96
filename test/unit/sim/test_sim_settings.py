"""sim_robot_node's parameter table: the checks the simulated arm relies on."""

from __future__ import annotations

from lerobot_ros.sim.settings import SimRobotSettings
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES


def test_the_defaults_simulate_the_so101_arm_with_one_raw_camera():
    made = SimRobotSettings.from_values({})
    assert made.joint_names == SO101_JOINT_NAMES and made.camera_topics == (
        "camera/front/image_raw",
    )
    assert made.camera_transport == "raw" and made.rate_hz == 100.0


def test_every_problem_is_reported_at_once():
    assert SimRobotSettings.problems_of(
        {
            "joint_names": [""],
            "rate_hz": 0.0,
            "camera_rate_hz": -1.0,
            "max_velocity": 0.0,
            "time_constant_s": 0.0,
            "camera_transport": "h264",
            "jpeg_quality": 0,
        }
    ) == [
        "'joint_names' is empty",
        "'rate_hz' is 0.0, expected more than 0",
        "'max_velocity' is 0.0, expected more than 0",
        "'time_constant_s' is 0.0, expected more than 0",
        "'camera_transport' is 'h264', expected one of ['raw', 'compressed']",
        "'camera_rate_hz' is -1.0, expected more than 0",
        "'jpeg_quality' is 0, expected 1..100",
    ]
