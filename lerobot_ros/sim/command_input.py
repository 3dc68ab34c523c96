"""Commands for the simulated arm, as the three executor output modes send them.

Invariant: commands are mapped to joints by name wherever the message names
its joints (JointTrajectory, JointState), so a driver never moves the wrong
motor because a sender ordered its joints differently; Float64MultiArray
carries no names and is taken in the arm's joint order, as ros2_control's
forward controllers do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def reorder_by_name(names: Sequence[str], values: Sequence[float], joint_names: Sequence[str]) -> np.ndarray:
    """``values`` keyed by ``names``, rearranged into ``joint_names`` order."""
    if len(names) != len(values):
        raise ValueError(f"{len(names)} joint names but {len(values)} values")
    lookup = dict(zip(names, values))
    missing = [name for name in joint_names if name not in lookup]
    if missing:
        raise ValueError(f"command lacks joints {missing}; expected all of {list(joint_names)}, got {list(names)}")
    return np.array([lookup[name] for name in joint_names], dtype=np.float64)


def in_joint_order(values: Sequence[float], joint_names: Sequence[str]) -> np.ndarray:
    if len(values) != len(joint_names):
        raise ValueError(f"command has {len(values)} values; expected {len(joint_names)} for {list(joint_names)}")
    return np.asarray(values, dtype=np.float64)


class TimedTrajectory:
    """Positions at times after the trajectory started, linearly interpolated.

    Like joint_trajectory_controller: a new trajectory replaces the old one;
    before the first point the target moves from where the arm was; after
    the last point it holds the last point.
    """

    def __init__(self, start_position: np.ndarray, times_s: Sequence[float], positions: Sequence[np.ndarray]) -> None:
        if len(times_s) != len(positions) or not len(times_s):
            raise ValueError(f"trajectory needs matching, non-empty times and positions ({len(times_s)} vs {len(positions)})")
        if any(b <= a for a, b in zip(times_s, times_s[1:])):
            raise ValueError(f"trajectory times must increase strictly: {list(times_s)}")
        self._times = np.concatenate([[0.0], np.asarray(times_s, dtype=np.float64)]) if times_s[0] > 0 else np.asarray(times_s, dtype=np.float64)
        stacked = np.stack([np.asarray(p, dtype=np.float64) for p in positions])
        self._positions = np.vstack([start_position, stacked]) if times_s[0] > 0 else stacked

    @property
    def duration_s(self) -> float:
        return float(self._times[-1])

    def target_at(self, elapsed_s: float) -> np.ndarray:
        if elapsed_s >= self._times[-1]:
            return self._positions[-1].copy()
        index = int(np.searchsorted(self._times, elapsed_s, side="right"))
        if index == 0:
            return self._positions[0].copy()
        t0, t1 = self._times[index - 1], self._times[index]
        weight = (elapsed_s - t0) / (t1 - t0)
        return (1 - weight) * self._positions[index - 1] + weight * self._positions[index]
