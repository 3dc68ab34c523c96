"""sim_robot_node's parameters: the table and the settings it makes.

Invariant: the simulated arm starts only with parameters it can run, each
written once, in ``PARAMETERS``; ``config/sim_robot.yaml`` and the README list
the same names and defaults (a test checks both). Plain Python (no rclpy).
"""

from __future__ import annotations

from lerobot_ros.images import CAMERA_TRANSPORTS
from lerobot_ros.parameters import (
    FLOAT,
    INTEGER,
    STRING,
    STRING_LIST,
    Parameter,
    in_range,
    more_than,
    one_of,
    required,
    settings_dataclass,
)
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, SO101_JOINT_NAMES

PARAMETERS = (
    Parameter("joint_names", STRING_LIST, list(SO101_JOINT_NAMES), "Joint names of the simulated arm, in its order",
              (required(),)),
    Parameter("rate_hz", FLOAT, 100.0, "Simulation step and joint_states publishing rate (Hz)", (more_than(0),)),
    Parameter("max_velocity", FLOAT, 3.0, "Velocity limit of every joint (rad/s)", (more_than(0),)),
    Parameter("time_constant_s", FLOAT, 0.05, "First-order tracking lag of the joints (seconds)", (more_than(0),)),
    Parameter("camera_topics", STRING_LIST, ["camera/front/image_raw"],
              "One topic per simulated camera (viewpoints alternate sides)"),
    Parameter("camera_transport", STRING, "raw", "raw (sensor_msgs/Image rgb8) or compressed (CompressedImage JPEG)",
              (one_of(CAMERA_TRANSPORTS),)),
    Parameter("camera_height", INTEGER, DEFAULT_IMAGE_SHAPE[0], "Rendered image height (pixels)"),
    Parameter("camera_width", INTEGER, DEFAULT_IMAGE_SHAPE[1], "Rendered image width (pixels)"),
    Parameter("camera_rate_hz", FLOAT, 30.0, "Camera publishing rate (Hz)", (more_than(0),)),
    Parameter("jpeg_quality", INTEGER, 90, "JPEG quality of compressed camera topics (1-100)", (in_range(1, 100),)),
    Parameter("seed", INTEGER, 0, "Seed of the scene (target object placement and texture)"),
)


class SimRobotSettings(settings_dataclass(PARAMETERS)):
    """Validated parameters (string lists without placeholders)."""
