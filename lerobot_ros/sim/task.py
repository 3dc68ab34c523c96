"""The simulated arm's task: bring the gripper to the cube and close it.

Invariant: an episode's outcome is a pure function of the seed, the episode
number and the joint positions it is shown at which times (no wall clock is
read here). Each episode places the cube anew (seeded by ``seed`` and the
episode number, only where the hand can reach it pointing down) and the
camera draws it there; the episode succeeds the first time the gripper tip
is within ``success_radius`` of the cube's centre with the gripper closed,
and fails when ``timeout_s`` passes first. A finished episode stays finished
until ``reset_delay_s`` later, when the next one starts from the home pose.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from lerobot_ros.sim.kinematics import Chain
from lerobot_ros.sim.so101 import JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS

#: The instruction stored with every recorded frame (LeRobot's ``task``).
TASK_DESCRIPTION = "move the gripper to the cube and close it"
#: Where cubes are placed, as fractions of (width, height) of the front frame.
CUBE_REGION = ((0.42, 0.68), (0.62, 0.80))
#: Gripper joint at or below this (radians) counts as closed.
GRIPPER_CLOSED = 0.1
GRIPPER_INDEX = 5


class Phase(enum.Enum):
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    FAILURE = "FAILURE"


@dataclass(frozen=True)
class TaskConfig:
    height: int
    width: int
    seed: int = 0
    timeout_s: float = 10.0
    reset_delay_s: float = 0.5
    #: Fraction of min(height, width); the cube's half-side is 1/12.
    success_radius: float = 0.06

    def __post_init__(self) -> None:
        if self.timeout_s <= 0 or self.reset_delay_s < 0 or self.success_radius <= 0:
            raise ValueError(
                f"timeout_s ({self.timeout_s}) and success_radius ({self.success_radius}) must be "
                "positive, "
                f"reset_delay_s ({self.reset_delay_s}) not negative"
            )


@dataclass(frozen=True)
class EpisodeStatus:
    episode: int
    phase: Phase
    cube: tuple[float, float]  # pixels of the front frame
    elapsed_s: float  # since the episode started, frozen at its outcome
    distance: float  # gripper tip to cube centre (pixels)


def cube_position(config: TaskConfig, episode: int) -> np.ndarray:
    """The cube's centre (pixels) in ``episode``: seeded, and always reachable with the hand
    down."""
    chain = Chain(config.height, config.width)
    rng = np.random.default_rng([config.seed, episode])
    (x_low, x_high), (y_low, y_high) = CUBE_REGION
    for _ in range(1000):
        cube = np.array(
            [rng.uniform(x_low, x_high) * config.width, rng.uniform(y_low, y_high) * config.height]
        )
        if chain.reach_down(cube, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS) is not None:
            return cube
    raise ValueError(
        f"no reachable cube position in {CUBE_REGION} of a {config.height}x{config.width} frame"
    )


class ReachTask:
    """Episodes of the task, advanced by ``update(position, now_s)``."""

    def __init__(self, config: TaskConfig, now_s: float, first_episode: int = 0) -> None:
        self.config = config
        self._chain = Chain(config.height, config.width)
        self._radius = config.success_radius * self._chain.scale
        self._start(first_episode, now_s)

    def _start(self, episode: int, now_s: float) -> None:
        self.episode = episode
        self.cube = cube_position(self.config, episode)
        self.phase = Phase.RUNNING
        self._started_s = now_s
        self._ended_s: float | None = None
        self._distance = float("inf")

    def update(self, position, now_s: float) -> bool:
        """Judge ``position`` at ``now_s``; True when a new episode started (the arm must go
        home)."""
        if self.phase is not Phase.RUNNING:
            if now_s - self._ended_s >= self.config.reset_delay_s:
                self._start(self.episode + 1, now_s)
                return True
            return False
        self._distance = float(np.linalg.norm(self._chain.tip(position) - self.cube))
        if self._distance <= self._radius and position[GRIPPER_INDEX] <= GRIPPER_CLOSED:
            self._end(Phase.SUCCESS, now_s)
        elif now_s - self._started_s >= self.config.timeout_s:
            self._end(Phase.FAILURE, now_s)
        return False

    def _end(self, phase: Phase, now_s: float) -> None:
        self.phase, self._ended_s = phase, now_s

    def status(self, now_s: float) -> EpisodeStatus:
        end = self._ended_s if self._ended_s is not None else now_s
        return EpisodeStatus(
            self.episode,
            self.phase,
            (float(self.cube[0]), float(self.cube[1])),
            end - self._started_s,
            self._distance,
        )
