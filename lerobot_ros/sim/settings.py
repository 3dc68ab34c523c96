"""sim_robot_node's parameters: the table and the settings it makes.

Invariant: the simulated arm starts only with parameters it can run, each
written once, in ``PARAMETERS``; ``config/sim_robot.yaml`` and
docs/reference/nodes/sim_robot_node.md list the same names and defaults (a test checks both).
Plain Python (no rclpy).
"""

from __future__ import annotations

from lerobot_ros.node_shell.parameters import (
    BOOL,
    FLOAT,
    INTEGER,
    STRING,
    STRING_LIST,
    Parameter,
    at_least,
    in_range,
    more_than,
    one_of,
    required,
    settings_dataclass,
)
from lerobot_ros.protocol.wire.images import CAMERA_TRANSPORTS
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, SO101_JOINT_NAMES

PARAMETERS = (
    Parameter(
        "joint_names",
        STRING_LIST,
        list(SO101_JOINT_NAMES),
        "Joint names of the simulated arm, in its order",
        (required(),),
    ),
    Parameter(
        "rate_hz",
        FLOAT,
        100.0,
        "Simulation step and joint_states publishing rate (Hz)",
        (more_than(0),),
    ),
    Parameter(
        "max_velocity", FLOAT, 3.0, "Velocity limit of every joint (rad/s)", (more_than(0),)
    ),
    Parameter(
        "time_constant_s",
        FLOAT,
        0.05,
        "First-order tracking lag of the joints (seconds)",
        (more_than(0),),
    ),
    Parameter(
        "camera_topics",
        STRING_LIST,
        ["camera/front/image_raw"],
        "One topic per simulated camera (viewpoints alternate sides)",
    ),
    Parameter(
        "camera_transport",
        STRING,
        "raw",
        "raw (sensor_msgs/Image rgb8) or compressed (CompressedImage JPEG)",
        (one_of(CAMERA_TRANSPORTS),),
    ),
    Parameter("camera_height", INTEGER, DEFAULT_IMAGE_SHAPE[0], "Rendered image height (pixels)"),
    Parameter("camera_width", INTEGER, DEFAULT_IMAGE_SHAPE[1], "Rendered image width (pixels)"),
    Parameter("camera_rate_hz", FLOAT, 30.0, "Camera publishing rate (Hz)", (more_than(0),)),
    Parameter(
        "jpeg_quality",
        INTEGER,
        90,
        "JPEG quality of compressed camera topics (1-100)",
        (in_range(1, 100),),
    ),
    Parameter(
        "seed", INTEGER, 0, "Seed of the scene (texture) and of each episode's cube placement"
    ),
    Parameter(
        "task_timeout_s",
        FLOAT,
        10.0,
        "An episode not solved this long after it started fails (seconds)",
        (more_than(0),),
    ),
    Parameter(
        "task_reset_delay_s",
        FLOAT,
        0.5,
        "Pause after an episode's outcome before the next starts from the home pose (seconds)",
        (at_least(0),),
    ),
    Parameter(
        "task_success_radius",
        FLOAT,
        0.06,
        "Gripper tip within this of the cube centre (fraction of the smaller image side), closed: "
        "success",
        (more_than(0),),
    ),
    Parameter(
        "expert",
        BOOL,
        False,
        "Drive the arm with the scripted expert (true cube position) on the forward_command topic",
    ),
    Parameter(
        "expert_noise",
        FLOAT,
        1.0,
        "Expert noise scale, 0: the same plan each episode (grasp offset in success radii, timing "
        "spread 25 %)",
        (at_least(0),),
    ),
)


class SimRobotSettings(settings_dataclass(PARAMETERS)):
    """Validated parameters (string lists without placeholders)."""
