"""Opening and appending to a LeRobot v3 dataset with LeRobot's own ``LeRobotDataset``.

Invariant: a dataset is never overwritten or mixed: a new directory is
created, an existing LeRobot dataset is appended to only when its fps and
features are exactly what the recorder writes, and anything else (other
features, other fps, a non-empty directory that is no LeRobot dataset) is
refused with what differs. An episode reaches the dataset whole or not at
all (``write_episode``); ``meta/lerobot_ros_episodes.jsonl`` says, per
dataset episode, what cut it (``source``), which episode of that source it
was (the task's episode, or the executor's episode and RunPolicy goal), its
outcome and whether the expert drove it.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from lerobot_ros.recording.episodes import TASK_SOURCE, FinishedEpisode, features_problem

EPISODES_FILE = "meta/lerobot_ros_episodes.jsonl"
ROBOT_TYPE = "so101_sim"


class DatasetRefused(ValueError):
    """The dataset directory cannot take this recorder's episodes; the message says why."""


@functools.cache
def video_backend() -> str:
    """torchcodec when it loads here, else pyav, decided quietly, once per process.

    LeRobot's own default (``get_safe_default_video_backend``) logs torchcodec's
    load error, about 100 lines of FFmpeg library attempts, before every
    training or dataset opened without FFmpeg's shared libraries: it read as a
    failure (issue 33). One line says it instead.
    """
    import importlib
    import logging

    try:
        importlib.import_module("torchcodec")
        return "torchcodec"
    except (ImportError, OSError, RuntimeError):
        logging.getLogger(__name__).info(
            "torchcodec cannot load here (no FFmpeg shared libraries): videos decode with pyav"
        )
        return "pyav"


def open_dataset(root: Path, repo_id: str, features: dict, fps: int, use_videos: bool):
    """A ``LeRobotDataset`` in write mode at ``root``: created if absent, resumed if it matches."""
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    root = Path(root)
    info_path = root / "meta" / "info.json"
    if info_path.is_file():
        info = json.loads(info_path.read_text())
        if info.get("fps") != fps:
            raise DatasetRefused(
                f"{root} was recorded at {info.get('fps')} fps; this recorder writes {fps} fps"
            )
        problem = features_problem(info.get("features", {}), features)
        if problem:
            raise DatasetRefused(f"{root}: {problem}")
        return LeRobotDataset.resume(repo_id, root=root, video_backend=video_backend())
    if root.exists() and any(root.iterdir()):
        raise DatasetRefused(
            f"{root} exists and is not a LeRobot dataset (no meta/info.json); refusing to write "
            "into it"
        )
    if root.exists():
        root.rmdir()  # empty: LeRobot creates it itself and refuses an existing one
    return LeRobotDataset.create(
        repo_id,
        fps,
        features,
        root=root,
        robot_type=ROBOT_TYPE,
        use_videos=use_videos,
        video_backend=video_backend(),
    )


def write_episode(dataset, episode: FinishedEpisode) -> int:
    """Append ``episode`` to ``dataset`` (LeRobot's add_frame + save_episode); its dataset
    index."""
    for frame in episode.frames:
        dataset.add_frame(dict(frame))
    dataset.save_episode()
    index = dataset.meta.total_episodes - 1
    record = {"episode_index": index, "source": episode.source}
    if episode.source == TASK_SOURCE:
        record["task_episode"] = episode.episode
    else:
        record["executor_episode"] = episode.episode
        if episode.goal_id:
            record["goal_id"] = episode.goal_id
    record |= {
        "outcome": episode.outcome,
        "expert": episode.expert,
        "elapsed_s": round(episode.elapsed_s, 3),
        "frames": len(episode.frames),
    }
    with (Path(dataset.root) / EPISODES_FILE).open("a") as log:
        log.write(json.dumps(record) + "\n")
    return index


def episode_records(root: Path) -> list[dict]:
    """What ``write_episode`` noted about each episode of the dataset at ``root``."""
    path = Path(root) / EPISODES_FILE
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if path.is_file()
        else []
    )
