"""How the simulated arm follows the commands it receives.

Invariant: the latest command wins, as with ros2_control's controllers: an
untimed command is the target at once, a timed one is followed point by point
on the receiver's clock the way joint_trajectory_controller does. Reading
commands out of their messages (by joint name where the message names its
joints) is each output mode's job: see ``lerobot_ros.protocol.wire.output_modes``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from lerobot_ros.protocol.wire.output_modes import JointCommand


def linear(fraction: float) -> float:
    return fraction


class TimedTrajectory:
    """Positions at times after the trajectory started, interpolated (linearly unless ``easing``
    says otherwise).

    Like joint_trajectory_controller: a new trajectory replaces the old one;
    before the first point the target moves from where the arm was; after
    the last point it holds the last point. ``easing`` maps the fraction of a
    segment's time elapsed to the fraction of its distance covered.
    """

    def __init__(
        self,
        start_position: np.ndarray,
        times_s: Sequence[float],
        positions: Sequence[np.ndarray],
        easing: Callable[[float], float] = linear,
    ) -> None:
        if len(times_s) != len(positions) or not len(times_s):
            raise ValueError(
                f"trajectory needs matching, non-empty times and positions ({len(times_s)} vs "
                f"{len(positions)})"
            )
        if any(b <= a for a, b in zip(times_s, times_s[1:], strict=False)):
            raise ValueError(f"trajectory times must increase strictly: {list(times_s)}")
        self._times = (
            np.concatenate([[0.0], np.asarray(times_s, dtype=np.float64)])
            if times_s[0] > 0
            else np.asarray(times_s, dtype=np.float64)
        )
        stacked = np.stack([np.asarray(p, dtype=np.float64) for p in positions])
        self._positions = np.vstack([start_position, stacked]) if times_s[0] > 0 else stacked
        self._easing = easing

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
        weight = self._easing((elapsed_s - t0) / (t1 - t0))
        return (1 - weight) * self._positions[index - 1] + weight * self._positions[index]


class CommandFollower:
    """Drives a SimulatedArm from the latest command, whatever its output mode.

    An untimed command replaces any trajectory and becomes the target at
    once; a timed one starts a new trajectory from where the arm is now.
    """

    def __init__(self, arm) -> None:
        self._arm = arm
        self._trajectory: TimedTrajectory | None = None
        self._started_s = 0.0

    def follow(self, command: JointCommand, now_s: float) -> None:
        """Take ``command`` as the arm's new target; a ValueError leaves the old one."""
        if command.time_from_start_s is None:
            self._arm.command(command.positions[0])
            self._trajectory = None
        else:
            self._trajectory = TimedTrajectory(
                self._arm.position.copy(), command.time_from_start_s, command.positions
            )
            self._started_s = now_s

    def reset(self) -> None:
        """The arm back at its initial pose; the trajectory being followed is dropped."""
        self._arm.reset()
        self._trajectory = None

    def step(self, now_s: float, dt_s: float) -> None:
        if self._trajectory is not None:
            self._arm.command(self._trajectory.target_at(now_s - self._started_s))
        self._arm.step(dt_s)
