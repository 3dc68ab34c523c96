"""Episodes as a LeRobot dataset sees them: features, frames and episode boundaries. No ROS, no torch.

Invariant: a dataset episode is exactly one task episode the recorder saw
from its start to its outcome, and holds every frame it sampled in between:
an episode whose start was missed (the recorder came up mid-episode) or
whose outcome never came (interrupted, or a status lost) is dropped whole,
never stored in part. A frame is sampled whenever the first camera delivers
an image, once the joint state and a command are known; it pairs that image
with the newest joint state (``observation.state``), the newest frame of
every other camera and the newest command published to the arm
(``action``), so expert demonstrations and policy rollouts are recorded the
same way: as what the arm was told to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

#: Columns LeRobot adds to every dataset by itself; they are not ours to compare.
LEROBOT_DEFAULT_FEATURES = frozenset({"timestamp", "frame_index", "episode_index", "index", "task_index"})
#: An episode is recorded only if the recorder saw it start: its first status
#: says it has run at most this long (the simulator announces a start at once).
START_TOLERANCE_S = 0.5
OUTCOMES = ("SUCCESS", "FAILURE")
RUNNING = "RUNNING"


def dataset_features(joint_names: Sequence[str], cameras: dict[str, tuple[int, int]], use_videos: bool) -> dict:
    """LeRobot feature specs: joint state and action (float32, by joint name) and one RGB image per camera."""
    joints = {"dtype": "float32", "shape": (len(joint_names),), "names": list(joint_names)}
    features = {"observation.state": dict(joints), "action": dict(joints)}
    for name, (height, width) in cameras.items():
        features[name] = {
            "dtype": "video" if use_videos else "image",
            "shape": (height, width, 3),
            "names": ["height", "width", "channels"],
        }
    return features


def features_problem(existing: dict, wanted: dict) -> str | None:
    """Why a dataset with ``existing`` features cannot take frames of ``wanted`` ones; None if it can."""
    ours = {key: value for key, value in existing.items() if key not in LEROBOT_DEFAULT_FEATURES}
    if set(ours) != set(wanted):
        return f"the dataset has features {sorted(ours)}; this recorder writes {sorted(wanted)}"
    for key, spec in wanted.items():
        have = ours[key]
        for aspect in ("dtype", "shape", "names"):
            a, b = have.get(aspect), spec.get(aspect)
            if (list(a) if isinstance(a, (list, tuple)) else a) != (list(b) if isinstance(b, (list, tuple)) else b):
                return f"feature {key!r} has {aspect} {a!r} in the dataset; this recorder writes {b!r}"
    return None


@dataclass
class FinishedEpisode:
    """One whole task episode, ready to be written."""

    episode: int
    outcome: str
    expert: bool
    elapsed_s: float
    task: str
    frames: list[dict] = field(default_factory=list)


class EpisodeBuffer:
    """Frames of the episode in progress, cut at the task's episode boundaries."""

    def __init__(self, joint_names: Sequence[str], cameras: dict[str, tuple[int, int]]) -> None:
        if not cameras:
            raise ValueError("the recorder needs at least one camera: frames are sampled on the first one")
        self._joint_names = tuple(joint_names)
        self._cameras = dict(cameras)
        self._trigger = next(iter(cameras))
        self._state: np.ndarray | None = None
        self._action: np.ndarray | None = None
        self._images: dict[str, np.ndarray] = {}
        self._current: FinishedEpisode | None = None
        self._last_episode: int | None = None
        self.dropped_episodes = 0

    @property
    def recording(self) -> int | None:
        """The episode being recorded, if any."""
        return self._current.episode if self._current is not None else None

    @property
    def frames(self) -> int:
        return len(self._current.frames) if self._current is not None else 0

    def on_joint_state(self, positions: np.ndarray) -> None:
        """The newest joint positions, in joint order."""
        self._state = np.asarray(positions, dtype=np.float32)

    def on_command(self, positions: np.ndarray) -> None:
        """The newest command published to the arm, in joint order."""
        self._action = np.asarray(positions, dtype=np.float32)

    def on_status(self, episode: int, phase: str, elapsed_s: float, expert: bool, task: str) -> FinishedEpisode | None:
        """Follow the task; returns the episode that just ended whole, if one did."""
        if phase == RUNNING:
            if self._current is not None and self._current.episode != episode:
                self.abandon()  # its outcome never came
            if self._current is None and episode != self._last_episode and elapsed_s <= START_TOLERANCE_S:
                self._current = FinishedEpisode(episode, "", expert, 0.0, task)
            self._last_episode = episode
            return None
        if phase not in OUTCOMES:
            raise ValueError(f"task phase {phase!r} is not one of {[RUNNING, *OUTCOMES]}")
        self._last_episode = episode
        if self._current is None or self._current.episode != episode:
            return None
        finished, self._current = self._current, None
        finished.outcome, finished.elapsed_s = phase, elapsed_s
        if not finished.frames:
            self.dropped_episodes += 1
            return None
        return finished

    def on_camera(self, name: str, rgb: np.ndarray) -> bool:
        """A camera frame (RGB, height x width x 3); True when it sampled a dataset frame."""
        if name not in self._cameras:
            raise ValueError(f"camera {name!r} is not one of {list(self._cameras)}")
        shape = (*self._cameras[name], 3)
        if rgb.shape != shape or rgb.dtype != np.uint8:
            raise ValueError(f"camera {name!r} frame is {rgb.dtype} {rgb.shape}; expected uint8 {shape}")
        self._images[name] = rgb
        if name != self._trigger or self._current is None:
            return False
        if self._state is None or self._action is None or len(self._images) < len(self._cameras):
            return False
        frame = {"observation.state": self._state.copy(), "action": self._action.copy(), "task": self._current.task}
        frame.update((camera, image.copy()) for camera, image in self._images.items())
        self._current.frames.append(frame)
        return True

    def abandon(self) -> int:
        """Drop the episode in progress (interrupted, or its end was lost); how many frames went."""
        if self._current is None:
            return 0
        frames, self._current = len(self._current.frames), None
        self.dropped_episodes += 1
        return frames
