"""Episodes as a LeRobot dataset sees them: features, frames and episode boundaries. No ROS, no
torch.

Invariant: a dataset episode is exactly one episode of its source that the
recorder saw from its start to its end, and holds every frame it sampled in
between. The source is one of: the simulated task's episodes
(``TaskEpisodes``, expert or policy), an executor's RunPolicy goals or its
episode ids (``ExecutorEpisodes``). An episode whose start was missed (the
recorder came up mid-episode) or whose end never came or was not the
policy's (interrupted, a status lost, the fail-safe took over) is dropped
whole, never stored in part. A frame is sampled whenever the first camera
delivers an image, once the joint state and a command of this episode are known
(the command before its start is the previous episode's, never a label); it pairs
that image with the newest joint state (``observation.state``), the newest
frame of every other camera and the newest command published to the arm
(``action``), so expert demonstrations and policy rollouts are recorded the
same way: as what the arm was told to do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from lerobot_ros.protocol.status import ExecutorState, Termination

#: Columns LeRobot adds to every dataset by itself; they are not ours to compare.
LEROBOT_DEFAULT_FEATURES = frozenset(
    {"timestamp", "frame_index", "episode_index", "index", "task_index"}
)
#: An episode is recorded only if the recorder saw it start: its first status
#: says it has run at most this long (the simulator announces a start at once).
START_TOLERANCE_S = 0.5
OUTCOMES = ("SUCCESS", "FAILURE")
#: The episode source of the simulated task's TaskStatus (the recorder's default).
TASK_SOURCE = "task"
RUNNING = "RUNNING"


def dataset_features(
    joint_names: Sequence[str], cameras: dict[str, tuple[int, int]], use_videos: bool
) -> dict:
    """LeRobot feature specs: joint state and action (float32, by joint name) and one RGB image per
    camera."""
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
    """Why a dataset with ``existing`` features cannot take frames of ``wanted`` ones; None if it
    can."""
    ours = {key: value for key, value in existing.items() if key not in LEROBOT_DEFAULT_FEATURES}
    if set(ours) != set(wanted):
        return f"the dataset has features {sorted(ours)}; this recorder writes {sorted(wanted)}"
    for key, spec in wanted.items():
        have = ours[key]
        for aspect in ("dtype", "shape", "names"):
            a, b = have.get(aspect), spec.get(aspect)
            if (list(a) if isinstance(a, (list, tuple)) else a) != (
                list(b) if isinstance(b, (list, tuple)) else b
            ):
                return (
                    f"feature {key!r} has {aspect} {a!r} in the dataset; this recorder writes "
                    f"{b!r}"
                )
    return None


@dataclass
class FinishedEpisode:
    """One whole episode, ready to be written.

    ``episode`` is the source's episode number (the task's, or the
    executor's); ``goal_id`` names the RunPolicy goal it was (source
    ``run_policy`` only).
    """

    source: str
    episode: int
    outcome: str
    expert: bool
    elapsed_s: float
    task: str
    goal_id: str = ""
    frames: list[dict] = field(default_factory=list)

    @property
    def key(self) -> int | str:
        """What tells this episode apart within its source."""
        return self.goal_id or self.episode


class EpisodeBuffer:
    """Frames of the episode in progress; a follower of one source says where episodes begin and
    end."""

    def __init__(self, joint_names: Sequence[str], cameras: dict[str, tuple[int, int]]) -> None:
        if not cameras:
            raise ValueError(
                "the recorder needs at least one camera: frames are sampled on the first one"
            )
        self._joint_names = tuple(joint_names)
        self._cameras = dict(cameras)
        self._trigger = next(iter(cameras))
        self._state: np.ndarray | None = None
        self._action: np.ndarray | None = None
        # the previous episode's last command, while repeated
        self._before_start: np.ndarray | None = None
        self._images: dict[str, np.ndarray] = {}
        self._current: FinishedEpisode | None = None
        self.dropped_episodes = 0

    @property
    def recording(self) -> int | str | None:
        """The key of the episode being recorded, if any."""
        return self._current.key if self._current is not None else None

    @property
    def frames(self) -> int:
        return len(self._current.frames) if self._current is not None else 0

    def begin(self, source: str, episode: int, expert: bool, task: str, goal_id: str = "") -> None:
        """Start recording an episode (one still in progress is dropped: its end never came)."""
        self.abandon()
        # The newest command is the previous episode's last (an expert repeats it through the reset
        # delay): frame 0 waits for a command commanded in this episode, or it would learn that
        # jump. An expert's repeat of it can still arrive after the start (commands and status are
        # separate topics, not ordered across each other on a loaded machine): no command of this
        # episode either. A policy rollout's first commands are its own hold until the first chunk,
        # whatever the one before was.
        self._before_start, self._action = (self._action if expert else None), None
        self._current = FinishedEpisode(source, episode, "", expert, 0.0, task, goal_id)

    def finish(self, key: int | str, outcome: str, elapsed_s: float) -> FinishedEpisode | None:
        """End the episode ``key`` whole; it is returned unless it held no frame (then dropped)."""
        if self._current is None or self._current.key != key:
            return None
        finished, self._current = self._current, None
        finished.outcome, finished.elapsed_s = outcome, elapsed_s
        if not finished.frames:
            self.dropped_episodes += 1
            return None
        return finished

    def abandon(self) -> int:
        """Drop the episode in progress (interrupted, or its end was lost); how many frames
        went."""
        if self._current is None:
            return 0
        frames, self._current = len(self._current.frames), None
        self.dropped_episodes += 1
        return frames

    def on_joint_state(self, positions: np.ndarray) -> None:
        """The newest joint positions, in joint order."""
        self._state = np.asarray(positions, dtype=np.float32)

    def on_command(self, positions: np.ndarray) -> None:
        """The newest command published to the arm, in joint order."""
        action = np.asarray(positions, dtype=np.float32)
        if (
            self._action is None
            and self._before_start is not None
            and np.array_equal(action, self._before_start)
        ):
            return  # the previous episode's last command, repeated: not this episode's
        self._action, self._before_start = action, None

    def on_camera(self, name: str, rgb: np.ndarray) -> bool:
        """A camera frame (RGB, height x width x 3); True when it sampled a dataset frame."""
        if name not in self._cameras:
            raise ValueError(f"camera {name!r} is not one of {list(self._cameras)}")
        shape = (*self._cameras[name], 3)
        if rgb.shape != shape or rgb.dtype != np.uint8:
            raise ValueError(
                f"camera {name!r} frame is {rgb.dtype} {rgb.shape}; expected uint8 {shape}"
            )
        self._images[name] = rgb
        if name != self._trigger or self._current is None:
            return False
        if self._state is None or self._action is None or len(self._images) < len(self._cameras):
            return False
        frame = {
            "observation.state": self._state.copy(),
            "action": self._action.copy(),
            "task": self._current.task,
        }
        frame.update((camera, image.copy()) for camera, image in self._images.items())
        self._current.frames.append(frame)
        return True


class TaskEpisodes:
    """Episodes of the simulated task (``lerobot_ros/TaskStatus``): expert demonstrations and
    rollouts alike."""

    source = TASK_SOURCE

    def __init__(self, buffer: EpisodeBuffer) -> None:
        self.buffer = buffer
        self._last_episode: int | None = None

    def on_status(
        self, episode: int, phase: str, elapsed_s: float, expert: bool, task: str
    ) -> FinishedEpisode | None:
        """Follow the task; returns the episode that just ended whole, if one did."""
        buffer = self.buffer
        if phase == RUNNING:
            if buffer.recording is not None and buffer.recording != episode:
                buffer.abandon()  # its outcome never came
            if (
                buffer.recording is None
                and episode != self._last_episode
                and elapsed_s <= START_TOLERANCE_S
            ):
                buffer.begin(self.source, episode, expert, task)
            self._last_episode = episode
            return None
        if phase not in OUTCOMES:
            raise ValueError(f"task phase {phase!r} is not one of {[RUNNING, *OUTCOMES]}")
        self._last_episode = episode
        return buffer.finish(episode, phase, elapsed_s)


#: How a RunPolicy goal may end and still be a whole episode: it ran the policy until its time was
#: up or the operator ended it. The others (timeout: no chunk ever came; failed: the server
#: refused; dead: the fail-safe stopped the arm) are not the policy's episode and are dropped.
WHOLE_GOAL_ENDS = tuple(
    end.value for end in (Termination.COMPLETED, Termination.CANCELLED, Termination.PREEMPTED)
)
#: The outcome of an executor episode that ended because the next one began.
EPISODE_ENDED = "episode_ended"
EXECUTOR_SOURCES = ("run_policy", "executor_episode")
EPISODE_SOURCES = (TASK_SOURCE, *EXECUTOR_SOURCES)


@dataclass(frozen=True)
class ExecutorSample:
    """What an ``ExecutorStatus`` says about episodes (same field names)."""

    episode: int
    state_name: str
    task: str
    goal_id: str
    last_goal_id: str
    last_goal_termination: str
    commands_published: int

    @classmethod
    def of(cls, status) -> ExecutorSample:
        return cls(**{name: getattr(status, name) for name in cls.__dataclass_fields__})


class ExecutorEpisodes:
    """Episodes of a chunk_executor_node, read from its ``~/status``: one per RunPolicy goal
    (``run_policy``) or one per episode id (``executor_episode``).

    The executor publishes its status at once when a goal starts or ends and
    when its episode changes, so boundaries are as sharp as the recorder's
    own frames. An episode is recorded only if the recorder saw it begin:
    a goal that was already running, or an episode the executor had already
    commanded, when the first status arrived is skipped. Each status is read
    whole, so one that is missed costs nothing as long as the next says the
    same (the goal that ended last and how); an end that cannot be told is
    dropped.
    """

    def __init__(self, buffer: EpisodeBuffer, source: str) -> None:
        if source not in EXECUTOR_SOURCES:
            raise ValueError(
                f"executor episode source {source!r} is not one of {list(EXECUTOR_SOURCES)}"
            )
        self.buffer, self.source = buffer, source
        self._seen = False
        self._last_key: int | str | None = None
        self._began_s = 0.0

    def on_status(self, status: ExecutorSample, now_s: float) -> FinishedEpisode | None:
        """Follow the executor; returns the episode that just ended whole, if one did."""
        buffer, by_goal = self.buffer, self.source == "run_policy"
        key = (status.goal_id or None) if by_goal else status.episode
        finished = None
        if buffer.recording is not None and buffer.recording != key:
            if by_goal:
                if (
                    status.last_goal_id == buffer.recording
                    and status.last_goal_termination in WHOLE_GOAL_ENDS
                ):
                    finished = buffer.finish(
                        buffer.recording, status.last_goal_termination, now_s - self._began_s
                    )
                else:
                    buffer.abandon()  # not the policy's whole episode, or how it ended was lost
            else:
                finished = buffer.finish(buffer.recording, EPISODE_ENDED, now_s - self._began_s)
        if status.state_name in (ExecutorState.DEAD.name, ExecutorState.OFFLINE.name):
            buffer.abandon()  # the fail-safe took the arm: no episode of the policy goes on
        elif key is not None and key != self._last_key and buffer.recording is None:
            began_here = self._seen or (not by_goal and status.commands_published == 0)
            if began_here:
                buffer.begin(
                    self.source,
                    status.episode,
                    False,
                    status.task,
                    status.goal_id if by_goal else "",
                )
                self._began_s = now_s
        self._seen, self._last_key = True, key
        return finished
