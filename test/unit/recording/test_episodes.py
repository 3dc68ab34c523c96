"""Episode buffering and feature mapping of the recorder (no ROS, no LeRobot)."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.recording.episodes import EpisodeBuffer, dataset_features, features_problem
from lerobot_ros.recording.settings import RecorderSettings

JOINTS = ("a", "b")
CAMERAS = {"observation.images.front": (16, 20), "observation.images.side": (16, 20)}
TASK = "reach"


def image(value: int) -> np.ndarray:
    return np.full((16, 20, 3), value, np.uint8)


def feed(buffer: EpisodeBuffer, value: int) -> bool:
    """One sensor round: state, command, the side camera, then the front camera that samples."""
    buffer.on_joint_state(np.array([value, value + 0.5]))
    buffer.on_command(np.array([-value, -value - 0.5]))
    buffer.on_camera("observation.images.side", image(100 + value))
    return buffer.on_camera("observation.images.front", image(value))


def test_features_name_the_joints_and_cameras_as_lerobot_expects():
    features = dataset_features(JOINTS, CAMERAS, use_videos=False)
    assert features["action"] == {"dtype": "float32", "shape": (2,), "names": ["a", "b"]}
    assert features["observation.state"] == features["action"]
    assert features["observation.images.front"] == {"dtype": "image", "shape": (16, 20, 3),
                                                    "names": ["height", "width", "channels"]}
    assert dataset_features(JOINTS, CAMERAS, use_videos=True)["observation.images.side"]["dtype"] == "video"


def test_a_dataset_with_other_features_is_told_apart_with_what_differs():
    ours = dataset_features(JOINTS, CAMERAS, use_videos=False)
    stored = {**{key: {**value, "shape": list(value["shape"])} for key, value in ours.items()},
              "timestamp": {"dtype": "float32", "shape": [1]}, "index": {"dtype": "int64", "shape": [1]}}
    assert features_problem(stored, ours) is None  # lists vs tuples and LeRobot's own columns do not count
    assert "has names ['a', 'c']" in features_problem({**stored, "action": {**stored["action"], "names": ["a", "c"]}}, ours)
    assert "dtype 'video'" in features_problem(stored | {"observation.images.front": {
        **stored["observation.images.front"], "dtype": "video"}}, ours)
    fewer = {key: value for key, value in stored.items() if key != "observation.images.side"}
    assert "this recorder writes" in features_problem(fewer, ours)


def test_an_episode_seen_from_start_to_outcome_holds_every_sampled_frame():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    assert buffer.on_status(3, "RUNNING", 0.0, True, TASK) is None and buffer.recording == 3
    assert [feed(buffer, value) for value in range(4)] == [True] * 4
    assert buffer.on_camera("observation.images.side", image(9)) is False, "only the first camera samples"
    finished = buffer.on_status(3, "SUCCESS", 1.25, True, TASK)
    assert (finished.episode, finished.outcome, finished.expert, finished.elapsed_s) == (3, "SUCCESS", True, 1.25)
    assert len(finished.frames) == 4 and buffer.recording is None
    last = finished.frames[-1]
    np.testing.assert_array_equal(last["observation.state"], np.float32([3, 3.5]))
    np.testing.assert_array_equal(last["action"], np.float32([-3, -3.5]))
    assert last["observation.images.front"][0, 0, 0] == 3 and last["observation.images.side"][0, 0, 0] == 103
    assert last["task"] == TASK and last["action"].dtype == np.float32
    assert feed(buffer, 5) is False, "nothing is sampled between episodes"


def test_frames_wait_for_every_input():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    buffer.on_status(0, "RUNNING", 0.0, False, TASK)
    assert buffer.on_camera("observation.images.front", image(1)) is False  # no state, command or side image yet
    buffer.on_joint_state(np.zeros(2))
    buffer.on_camera("observation.images.side", image(1))
    assert buffer.on_camera("observation.images.front", image(1)) is False  # still no command
    buffer.on_command(np.zeros(2))
    assert buffer.on_camera("observation.images.front", image(1)) is True


def test_an_episode_joined_late_or_never_finished_is_dropped_whole():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    buffer.on_status(0, "RUNNING", 2.0, False, TASK)  # came up mid-episode
    assert buffer.recording is None and feed(buffer, 1) is False
    assert buffer.on_status(0, "FAILURE", 10.0, False, TASK) is None
    buffer.on_status(1, "RUNNING", 0.0, False, TASK)
    feed(buffer, 1)
    buffer.on_status(2, "RUNNING", 0.0, False, TASK)  # episode 1's outcome was lost
    assert buffer.recording == 2 and buffer.dropped_episodes == 1 and buffer.frames == 0
    feed(buffer, 2)
    feed(buffer, 3)
    assert buffer.abandon() == 2 and buffer.recording is None and buffer.dropped_episodes == 2
    assert buffer.on_status(2, "SUCCESS", 1.0, False, TASK) is None
    buffer.on_status(2, "RUNNING", 0.1, False, TASK)  # a late repeat of a start already seen does not reopen it
    assert buffer.recording is None


def test_bad_input_is_refused_with_what_was_expected():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    with pytest.raises(ValueError, match="camera 'observation.images.top' is not one of"):
        buffer.on_camera("observation.images.top", image(0))
    with pytest.raises(ValueError, match=r"frame is uint8 \(8, 8, 3\); expected uint8 \(16, 20, 3\)"):
        buffer.on_camera("observation.images.front", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="task phase 'PAUSED' is not one of"):
        buffer.on_status(0, "PAUSED", 0.0, False, TASK)
    with pytest.raises(ValueError, match="at least one camera"):
        EpisodeBuffer(JOINTS, {})


def test_recorder_settings_need_a_dataset_and_aligned_cameras():
    assert RecorderSettings.problems_of({}) == ["'dataset_root' is empty: name the dataset directory"]
    problems = RecorderSettings.problems_of({"dataset_root": "/tmp/x", "camera_topics": ["a", "b"], "max_episodes": -1})
    assert any("max_episodes" in problem for problem in problems)
    assert any("one entry per camera (1)" in problem for problem in problems)
    made = RecorderSettings.from_values({"dataset_root": "/tmp/x", "image_height": 48, "image_width": 64})
    assert made.cameras == {"observation.images.front": (48, 64)}
