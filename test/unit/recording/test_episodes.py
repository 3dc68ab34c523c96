"""Episode buffering and feature mapping of the recorder (no ROS, no LeRobot)."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.recording.episodes import (
    EpisodeBuffer,
    ExecutorEpisodes,
    ExecutorSample,
    TaskEpisodes,
    dataset_features,
    features_problem,
)
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
    assert features["observation.images.front"] == {
        "dtype": "image",
        "shape": (16, 20, 3),
        "names": ["height", "width", "channels"],
    }
    assert (
        dataset_features(JOINTS, CAMERAS, use_videos=True)["observation.images.side"]["dtype"]
        == "video"
    )


def test_a_dataset_with_other_features_is_told_apart_with_what_differs():
    ours = dataset_features(JOINTS, CAMERAS, use_videos=False)
    stored = {
        **{key: {**value, "shape": list(value["shape"])} for key, value in ours.items()},
        "timestamp": {"dtype": "float32", "shape": [1]},
        "index": {"dtype": "int64", "shape": [1]},
    }
    # lists vs tuples and LeRobot's own columns do not count
    assert features_problem(stored, ours) is None
    assert "has names ['a', 'c']" in features_problem(
        {**stored, "action": {**stored["action"], "names": ["a", "c"]}}, ours
    )
    assert "dtype 'video'" in features_problem(
        stored
        | {"observation.images.front": {**stored["observation.images.front"], "dtype": "video"}},
        ours,
    )
    fewer = {key: value for key, value in stored.items() if key != "observation.images.side"}
    assert "this recorder writes" in features_problem(fewer, ours)


def test_an_episode_seen_from_start_to_outcome_holds_every_sampled_frame():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    tasks = TaskEpisodes(buffer)
    assert tasks.on_status(3, "RUNNING", 0.0, True, TASK) is None and buffer.recording == 3
    assert [feed(buffer, value) for value in range(4)] == [True] * 4
    assert buffer.on_camera("observation.images.side", image(9)) is False, (
        "only the first camera samples"
    )
    finished = tasks.on_status(3, "SUCCESS", 1.25, True, TASK)
    assert (
        finished.source,
        finished.episode,
        finished.outcome,
        finished.expert,
        finished.elapsed_s,
    ) == ("task", 3, "SUCCESS", True, 1.25)
    assert len(finished.frames) == 4 and buffer.recording is None
    last = finished.frames[-1]
    np.testing.assert_array_equal(last["observation.state"], np.float32([3, 3.5]))
    np.testing.assert_array_equal(last["action"], np.float32([-3, -3.5]))
    assert (
        last["observation.images.front"][0, 0, 0] == 3
        and last["observation.images.side"][0, 0, 0] == 103
    )
    assert last["task"] == TASK and last["action"].dtype == np.float32
    assert feed(buffer, 5) is False, "nothing is sampled between episodes"


def test_frame_0_of_every_episode_carries_a_command_of_that_episode_never_the_previous_ones():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    tasks = TaskEpisodes(buffer)
    tasks.on_status(1, "RUNNING", 0.0, True, TASK)
    feed(buffer, 1)
    tasks.on_status(1, "SUCCESS", 1.0, True, TASK)
    # the expert repeats its last command through the reset delay
    buffer.on_command(np.array([7.0, 7.5]))
    tasks.on_status(2, "RUNNING", 0.0, True, TASK)
    # Cameras and states of the new episode come before its first command: no frame until it does.
    buffer.on_joint_state(np.array([0.0, 0.0]))
    buffer.on_camera("observation.images.side", image(50))
    assert buffer.on_camera("observation.images.front", image(50)) is False
    # A repeat sent before the start may be delivered after it (another topic): still not this
    # episode's.
    buffer.on_command(np.array([7.0, 7.5]))
    assert buffer.on_camera("observation.images.front", image(50)) is False
    buffer.on_command(np.array([0.25, 0.5]))
    assert buffer.on_camera("observation.images.front", image(51)) is True
    # once the episode commanded, the same values are its own
    buffer.on_command(np.array([7.0, 7.5]))
    assert buffer.on_camera("observation.images.front", image(52)) is True
    finished = tasks.on_status(2, "SUCCESS", 1.0, True, TASK)
    np.testing.assert_array_equal(finished.frames[0]["action"], np.float32([0.25, 0.5]))


def test_frames_wait_for_every_input():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    buffer.begin("task", 0, False, TASK)
    # no state, command or side image yet
    assert buffer.on_camera("observation.images.front", image(1)) is False
    buffer.on_joint_state(np.zeros(2))
    buffer.on_camera("observation.images.side", image(1))
    assert buffer.on_camera("observation.images.front", image(1)) is False  # still no command
    buffer.on_command(np.zeros(2))
    assert buffer.on_camera("observation.images.front", image(1)) is True


def test_an_episode_joined_late_or_never_finished_is_dropped_whole():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    tasks = TaskEpisodes(buffer)
    tasks.on_status(0, "RUNNING", 2.0, False, TASK)  # came up mid-episode
    assert buffer.recording is None and feed(buffer, 1) is False
    assert tasks.on_status(0, "FAILURE", 10.0, False, TASK) is None
    tasks.on_status(1, "RUNNING", 0.0, False, TASK)
    feed(buffer, 1)
    tasks.on_status(2, "RUNNING", 0.0, False, TASK)  # episode 1's outcome was lost
    assert buffer.recording == 2 and buffer.dropped_episodes == 1 and buffer.frames == 0
    feed(buffer, 2)
    feed(buffer, 3)
    assert buffer.abandon() == 2 and buffer.recording is None and buffer.dropped_episodes == 2
    assert tasks.on_status(2, "SUCCESS", 1.0, False, TASK) is None
    # a late repeat of a start already seen does not reopen it
    tasks.on_status(2, "RUNNING", 0.1, False, TASK)
    assert buffer.recording is None


def test_bad_input_is_refused_with_what_was_expected():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    with pytest.raises(ValueError, match="camera 'observation.images.top' is not one of"):
        buffer.on_camera("observation.images.top", image(0))
    with pytest.raises(
        ValueError, match=r"frame is uint8 \(8, 8, 3\); expected uint8 \(16, 20, 3\)"
    ):
        buffer.on_camera("observation.images.front", np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(ValueError, match="task phase 'PAUSED' is not one of"):
        TaskEpisodes(buffer).on_status(0, "PAUSED", 0.0, False, TASK)
    with pytest.raises(ValueError, match="source 'task' is not one of"):
        ExecutorEpisodes(buffer, "task")
    with pytest.raises(ValueError, match="at least one camera"):
        EpisodeBuffer(JOINTS, {})


def test_recorder_settings_need_a_dataset_and_aligned_cameras():
    assert RecorderSettings.problems_of({}) == [
        "'dataset_root' is empty: name the dataset directory"
    ]
    problems = RecorderSettings.problems_of(
        {"dataset_root": "/tmp/x", "camera_topics": ["a", "b"], "max_episodes": -1}
    )
    assert any("max_episodes" in problem for problem in problems)
    assert any("one entry per camera (1)" in problem for problem in problems)
    made = RecorderSettings.from_values(
        {"dataset_root": "/tmp/x", "image_height": 48, "image_width": 64}
    )
    assert made.cameras == {"observation.images.front": (48, 64)}


def executor(
    episode=1, state="STREAMING", task=TASK, goal="", last="", how="", commands=100
) -> ExecutorSample:
    return ExecutorSample(episode, state, task, goal, last, how, commands)


def test_one_episode_per_run_policy_goal_with_its_task_and_how_it_ended():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    goals = ExecutorEpisodes(buffer, "run_policy")
    assert goals.on_status(executor(goal="a"), 0.0) is None and buffer.recording is None, (
        "running before we came: skipped"
    )
    feed(buffer, 1)
    assert goals.on_status(executor(last="a", how="completed"), 1.0) is None, (
        "no frame of it was recorded"
    )
    assert (
        goals.on_status(executor(episode=2, goal="b", task="pick", last="a", how="completed"), 2.0)
        is None
    )
    assert buffer.recording == "b"
    # a rollout's first commands (its hold) are its own, even when the one before was the same
    feed(buffer, 1)
    feed(buffer, 2)
    assert (
        goals.on_status(executor(episode=2, goal="b", task="pick", last="a", how="completed"), 2.5)
        is None
    )
    # b is preempted by c: one status says both.
    finished = goals.on_status(executor(episode=2, goal="c", last="b", how="preempted"), 3.5)
    assert (
        finished.source,
        finished.goal_id,
        finished.key,
        finished.episode,
        finished.outcome,
    ) == ("run_policy", "b", "b", 2, "preempted")
    assert finished.elapsed_s == pytest.approx(1.5) and finished.expert is False
    assert len(finished.frames) == 2 and finished.frames[0]["task"] == "pick"
    assert buffer.recording == "c"
    feed(buffer, 3)
    assert (
        goals.on_status(executor(episode=3, last="c", how="cancelled"), 4.0).outcome == "cancelled"
    )
    assert buffer.dropped_episodes == 0


def test_a_goal_that_was_not_the_policys_episode_or_whose_end_was_lost_is_dropped():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    goals = ExecutorEpisodes(buffer, "run_policy")
    goals.on_status(executor(), 0.0)
    for goal, termination in (("a", "timeout"), ("b", "failed"), ("c", "dead")):
        goals.on_status(executor(goal=goal), 1.0)
        feed(buffer, 1)
        assert goals.on_status(executor(last=goal, how=termination), 2.0) is None, termination
    assert buffer.dropped_episodes == 3
    goals.on_status(executor(goal="d"), 3.0)
    feed(buffer, 1)
    # d and then e ended while two statuses were missed: how d ended cannot be told.
    assert (
        goals.on_status(executor(last="e", how="completed"), 4.0) is None
        and buffer.dropped_episodes == 4
    )
    goals.on_status(executor(goal="f"), 5.0)
    feed(buffer, 1)
    assert goals.on_status(executor(goal="f", state="DEAD"), 6.0) is None
    assert buffer.recording is None and buffer.dropped_episodes == 5


def test_one_episode_per_executor_episode_id():
    buffer = EpisodeBuffer(JOINTS, CAMERAS)
    episodes = ExecutorEpisodes(buffer, "executor_episode")
    episodes.on_status(executor(episode=0, commands=50), 0.0)
    assert buffer.recording is None, (
        "episode 0 had already commanded the arm when the recorder came"
    )
    episodes.on_status(executor(episode=1, task="pick"), 1.0)
    assert buffer.recording == 1
    feed(buffer, 1)
    finished = episodes.on_status(executor(episode=2), 3.0)
    assert (
        finished.source,
        finished.key,
        finished.outcome,
        finished.goal_id,
        finished.elapsed_s,
    ) == ("executor_episode", 1, "episode_ended", "", 2.0)
    assert finished.frames[0]["task"] == "pick" and buffer.recording == 2
    feed(buffer, 1)
    assert (
        episodes.on_status(executor(episode=2, state="DEAD"), 4.0) is None
        and buffer.recording is None
    )
    episodes.on_status(executor(episode=2, state="CONNECTING"), 5.0)
    assert buffer.recording is None, "the episode the fail-safe ended does not restart"

    fresh = EpisodeBuffer(JOINTS, CAMERAS)
    ExecutorEpisodes(fresh, "executor_episode").on_status(
        executor(episode=0, state="CONNECTING", commands=0), 0.0
    )
    assert fresh.recording == 0, "an executor that has not commanded yet is at its episode's start"
