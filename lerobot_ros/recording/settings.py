"""episode_recorder_node's parameters: the table and the settings it makes.

Invariant: the recorder starts only with parameters that describe one
dataset it can write, each written once, in ``PARAMETERS``;
``config/episode_recorder.yaml`` and docs/reference/nodes/episode_recorder_node.md list the
same names and defaults (a test checks both). Plain Python (no rclpy).
"""

from __future__ import annotations

from lerobot_ros.node_shell.parameters import (
    BOOL,
    INTEGER,
    STRING,
    STRING_LIST,
    Parameter,
    at_least,
    distinct,
    each_one_of,
    in_range,
    one_of,
    required,
    settings_dataclass,
)
from lerobot_ros.protocol.wire.images import CAMERA_TRANSPORTS
from lerobot_ros.protocol.wire.output_modes import DEFAULT_OUTPUT_MODE, OUTPUT_MODES
from lerobot_ros.recording.episodes import EPISODE_SOURCES, TASK_SOURCE
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA, SO101_JOINT_NAMES

PARAMETERS = (
    Parameter(
        "dataset_root",
        STRING,
        "",
        "Directory of the LeRobot dataset: created if absent, appended to if it matches",
        (required("name the dataset directory"),),
    ),
    Parameter(
        "repo_id",
        STRING,
        "local/so101_sim_reach",
        "The dataset's LeRobot repo id (stored in its metadata)",
        (required(),),
    ),
    Parameter(
        "fps",
        INTEGER,
        30,
        "Dataset frame rate; frames are sampled on the first camera, so match its rate",
        (in_range(1, 1000),),
    ),
    Parameter(
        "joint_names",
        STRING_LIST,
        list(SO101_JOINT_NAMES),
        "Joint names of state and action, in order",
        (required(), distinct("joint")),
    ),
    Parameter(
        "state_topic",
        STRING,
        "joint_states",
        "sensor_msgs/JointState topic of the robot state (by joint name)",
        (required(),),
    ),
    Parameter(
        "camera_names",
        STRING_LIST,
        [FRONT_CAMERA],
        "Image feature name of each camera",
        (required(), distinct("camera")),
    ),
    Parameter(
        "camera_topics",
        STRING_LIST,
        ["camera/front/image_raw"],
        "Image topic of each camera, index-aligned",
    ),
    Parameter(
        "camera_transports",
        STRING_LIST,
        ["raw"],
        "Per camera: raw (sensor_msgs/Image) or compressed",
        (each_one_of(CAMERA_TRANSPORTS),),
    ),
    Parameter(
        "image_height",
        INTEGER,
        DEFAULT_IMAGE_SHAPE[0],
        "Height of the stored images; frames are resized to it",
        (in_range(16, 4096),),
    ),
    Parameter(
        "image_width",
        INTEGER,
        DEFAULT_IMAGE_SHAPE[1],
        "Width of the stored images; frames are resized to it",
        (in_range(16, 4096),),
    ),
    Parameter(
        "command_mode",
        STRING,
        DEFAULT_OUTPUT_MODE,
        "Output mode of the commands recorded as the action",
        (one_of(OUTPUT_MODES),),
    ),
    Parameter(
        "command_topic",
        STRING,
        "",
        "Topic of the commands published to the arm; empty: the mode's default",
    ),
    Parameter(
        "episode_source",
        STRING,
        TASK_SOURCE,
        "What cuts the dataset's episodes: task (the sim's TaskStatus), run_policy (one per "
        "RunPolicy goal "
        "of the executor) or executor_episode (one per episode id of the executor)",
        (one_of(EPISODE_SOURCES),),
    ),
    Parameter(
        "task_status_topic",
        STRING,
        "sim_robot/status",
        "lerobot_ros/TaskStatus topic whose episodes cut the dataset's (episode_source task)",
        (required(),),
    ),
    Parameter(
        "executor_status_topic",
        STRING,
        "chunk_executor/status",
        "lerobot_ros/ExecutorStatus topic of the executor whose goals or episodes cut the "
        "dataset's "
        "(episode_source run_policy or executor_episode)",
        (required(),),
    ),
    Parameter(
        "use_videos",
        BOOL,
        False,
        "Store camera frames as MP4 videos (LeRobot video features) instead of images",
    ),
    Parameter(
        "max_episodes",
        INTEGER,
        0,
        "Stop (and finalize) after writing this many episodes; 0: until interrupted",
        (at_least(0),),
    ),
)


def _cameras_aligned(settings) -> str | None:
    cameras = len(settings.camera_names)
    if len(settings.camera_topics) != cameras or len(settings.camera_transports) != cameras:
        return (
            f"camera_topics ({len(settings.camera_topics)}) and camera_transports "
            f"({len(settings.camera_transports)}) need one entry per camera ({cameras})"
        )
    return None


class RecorderSettings(settings_dataclass(PARAMETERS, (_cameras_aligned,))):
    """Validated parameters of episode_recorder_node."""

    @property
    def cameras(self) -> dict[str, tuple[int, int]]:
        """Camera feature name -> stored (height, width)."""
        return {name: (self.image_height, self.image_width) for name in self.camera_names}
