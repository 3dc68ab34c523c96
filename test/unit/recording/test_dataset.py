"""Writing episodes with LeRobot's own LeRobotDataset: read back, appended, never mixed or
overwritten."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.recording.dataset import (
    DatasetRefused,
    episode_records,
    open_dataset,
    write_episode,
)
from lerobot_ros.recording.episodes import FinishedEpisode, dataset_features

JOINTS = ("a", "b")
CAMERAS = {"observation.images.front": (16, 20)}
FEATURES = dataset_features(JOINTS, CAMERAS, use_videos=False)


def episode(
    number: int, frames: int, outcome: str = "SUCCESS", source: str = "task", goal_id: str = ""
) -> FinishedEpisode:
    return FinishedEpisode(
        source,
        number,
        outcome,
        expert=source == "task",
        elapsed_s=frames / 30,
        task="reach",
        goal_id=goal_id,
        frames=[
            {
                "observation.state": np.float32([i, number]),
                "action": np.float32([-i, number]),
                "observation.images.front": np.full((16, 20, 3), 10 * i, np.uint8),
                "task": "reach",
            }
            for i in range(frames)
        ],
    )


def test_episodes_read_back_with_lerobots_dataset_class_and_a_matching_dataset_is_appended(
    tmp_path,
):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = tmp_path / "data"
    dataset = open_dataset(root, "local/test", FEATURES, 30, use_videos=False)
    assert write_episode(dataset, episode(4, 5)) == 0
    dataset.finalize()
    dataset = open_dataset(root, "local/test", FEATURES, 30, use_videos=False)
    assert write_episode(dataset, episode(7, 3, "cancelled", "run_policy", "9f" * 16)) == 1
    dataset.finalize()

    loaded = LeRobotDataset("local/test", root=root)
    assert (loaded.num_episodes, loaded.num_frames, loaded.fps) == (2, 8, 30)
    assert loaded.features["action"]["names"] == list(JOINTS)
    frame = loaded[6]  # second episode, frame 1
    np.testing.assert_array_equal(frame["observation.state"].numpy(), [1, 7])
    np.testing.assert_array_equal(frame["action"].numpy(), [-1, 7])
    assert frame["episode_index"].item() == 1 and frame["task"] == "reach"
    assert frame["timestamp"].item() == pytest.approx(1 / 30)
    np.testing.assert_allclose(frame["observation.images.front"].numpy(), 10 / 255, atol=1e-6)
    assert episode_records(root) == [
        {
            "episode_index": 0,
            "source": "task",
            "task_episode": 4,
            "outcome": "SUCCESS",
            "expert": True,
            "elapsed_s": round(5 / 30, 3),
            "frames": 5,
        },
        {
            "episode_index": 1,
            "source": "run_policy",
            "executor_episode": 7,
            "goal_id": "9f" * 16,
            "outcome": "cancelled",
            "expert": False,
            "elapsed_s": 0.1,
            "frames": 3,
        },
    ]


def test_a_dataset_of_other_features_fps_or_a_foreign_directory_is_refused_untouched(tmp_path):
    root = tmp_path / "data"
    dataset = open_dataset(root, "local/test", FEATURES, 30, use_videos=False)
    write_episode(dataset, episode(0, 2))
    dataset.finalize()
    before = sorted(path.relative_to(root) for path in root.rglob("*"))
    with pytest.raises(
        DatasetRefused, match=r"feature 'observation.images.front' has shape \[16, 20, 3\]"
    ):
        open_dataset(
            root,
            "local/test",
            dataset_features(JOINTS, {"observation.images.front": (32, 40)}, False),
            30,
            use_videos=False,
        )
    with pytest.raises(DatasetRefused, match="recorded at 30 fps; this recorder writes 15 fps"):
        open_dataset(root, "local/test", FEATURES, 15, use_videos=False)
    assert sorted(path.relative_to(root) for path in root.rglob("*")) == before
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"not a dataset")
    with pytest.raises(DatasetRefused, match="is not a LeRobot dataset"):
        open_dataset(foreign, "local/test", FEATURES, 30, use_videos=False)


def test_opening_a_dataset_and_training_configs_do_not_print_torchcodecs_load_error(
    tmp_path, caplog, capfd
):
    # Issue 33: about 100 lines of FFmpeg library attempts (torchcodec's load error, logged by
    # LeRobot's default video backend) came before every training where FFmpeg's shared libraries
    # are absent.
    import logging

    from lerobot.configs.default import DatasetConfig

    from lerobot_ros.recording.dataset import video_backend

    caplog.set_level(logging.INFO)
    open_dataset(tmp_path / "quiet", "local/test", FEATURES, 30, use_videos=False)
    backend = video_backend()
    config = DatasetConfig(
        repo_id="local/test", root=str(tmp_path / "quiet"), video_backend=backend
    )
    captured = capfd.readouterr()
    everything = caplog.text + captured.out + captured.err
    assert (
        "cannot be loaded (see the error above)" not in everything
        and "FFmpeg version" not in everything
    )
    assert everything.count("torchcodec") <= 1 and len(everything.splitlines()) <= 4, everything
    assert config.video_backend == backend in ("torchcodec", "pyav")
