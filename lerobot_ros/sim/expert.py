"""A scripted expert for the reach task: it solves the episode from the true cube position.

Invariant: a plan is a pure function of the start pose, the cube and the
random generator it is given, so a seeded run replays exactly; the noise
moves the hover pose and the grasp point and stretches the timing but never the final grasp point
by more than a third of the success radius, so every noisy demonstration
still succeeds. The plan: open the gripper while moving the hand above the
cube, lower it onto the cube, close the gripper, hold. Between waypoints the
joints follow a smooth (cosine) profile, as a demonstrator's hand would.
"""

from __future__ import annotations

import math

import numpy as np

from lerobot_ros.sim.command_input import TimedTrajectory
from lerobot_ros.sim.kinematics import Chain
from lerobot_ros.sim.so101 import JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS
from lerobot_ros.sim.task import GRIPPER_INDEX, TaskConfig

GRIPPER_OPEN = 1.0
GRIPPER_SHUT = 0.0
#: Nominal durations (seconds) of: move above the cube, lower onto it, close.
PHASE_DURATIONS_S = (1.2, 0.6, 0.4)
#: The hover pose is the grasp pose with the shoulder lifted back by this much (radians),
#: which raises the hand above the cube wherever the cube is.
HOVER_LIFT = 0.35


class ExpertPlan:
    """Joint targets over time for one episode; ``command_at(t)`` with t since the episode
    started."""

    def __init__(
        self, config: TaskConfig, start, cube, rng: np.random.Generator, noise: float
    ) -> None:
        if noise < 0:
            raise ValueError(f"expert noise must not be negative, got {noise}")
        chain = Chain(config.height, config.width)
        scale = chain.scale
        start = np.asarray(start, dtype=np.float64)
        cube = np.asarray(cube, dtype=np.float64)
        # Noise is in units of the success radius (positions) and of the nominal durations
        # (timing).
        radius = config.success_radius * scale
        offset = _bounded(rng, 2, noise * radius, radius / 3)
        # The cube is reachable (task.cube_position) but a point beside it may not be: halve the
        # offset until it is.
        for shrink in (1.0, 0.5, 0.25, 0.0):
            grasp = self._pose(chain, cube + shrink * offset, start, GRIPPER_OPEN)
            if grasp is not None:
                break
        hover = grasp.copy()
        hover[1:4] += np.array([-HOVER_LIFT, 0.0, 0.0]) + _bounded(rng, 3, 0.1 * noise, 0.2)
        hover = np.clip(hover, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS)
        closed = grasp.copy()
        closed[GRIPPER_INDEX] = GRIPPER_SHUT
        stretch = np.clip(1.0 + rng.normal(0.0, 0.25 * noise, 3), 0.6, 1.6)
        times = np.concatenate([[0.0], np.cumsum(np.array(PHASE_DURATIONS_S) * stretch)])
        self._trajectory = TimedTrajectory(
            start, times, [start, hover, grasp, closed], easing=_cosine
        )

    @staticmethod
    def _pose(
        chain: Chain, point: np.ndarray, start: np.ndarray, gripper: float
    ) -> np.ndarray | None:
        joints = chain.reach_down(point, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS)
        if joints is None:
            return None
        pose = start.copy()
        pose[0] = 0.0  # the task is in the camera's plane
        pose[1:4] = joints
        pose[GRIPPER_INDEX] = gripper
        return pose

    @property
    def duration_s(self) -> float:
        return self._trajectory.duration_s

    def command_at(self, elapsed_s: float) -> np.ndarray:
        return self._trajectory.target_at(elapsed_s)


def _cosine(fraction: float) -> float:
    """A smooth start and stop within a segment, as a demonstrator's hand moves."""
    return 0.5 - 0.5 * math.cos(math.pi * fraction)


def _bounded(rng: np.random.Generator, size: int, sigma: float, bound: float) -> np.ndarray:
    """Gaussian offsets of standard deviation ``sigma``, their length capped at ``bound``."""
    offset = rng.normal(0.0, sigma, size) if sigma > 0 else np.zeros(size)
    length = float(np.linalg.norm(offset))
    return offset * (bound / length) if length > bound else offset
