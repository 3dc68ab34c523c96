"""A user's checkpoint on a user's robot: joint names and units between the robot and the policy.

The robot side (``joint_names``, JointState, commands, joint limits, the
fallback, the queue the control loop plays) is in robot units, ROS's
radians; the policy side (its action names, the state it reads, the actions
it returns and the RTC prefix it is given back) in the policy's: LeRobot's
SO-100/SO-101 follower works in degrees, its gripper 0-100 (older datasets
-100..100). Per joint ``i``:

    policy = robot * joint_scale[i] + joint_offset[i]
    robot  = (policy - joint_offset[i]) / joint_scale[i]

and ``policy_joint_names[i]`` is the policy's name for ``joint_names[i]``
(the handshake checks the policy's action names against these). Empty lists
mean no mapping (the same names, scale 1, offset 0), and then nothing is
computed at all. Documented presets: docs/reference/nodes/chunk_executor_node.md.

Plain numpy; validated with the other parameters (``mapping_problem``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def mapping_problem(
    joint_names: Sequence[str],
    policy_names: Sequence[str],
    scale: Sequence[float],
    offset: Sequence[float],
) -> str | None:
    """Why these parameters do not map the robot's joints to the policy's, or None."""
    count = len(joint_names)
    for name, values in (
        ("policy_joint_names", policy_names),
        ("joint_scale", scale),
        ("joint_offset", offset),
    ):
        if values and len(values) != count:
            return (
                f"'{name}' needs one entry per joint of joint_names ({count}), got {len(values)}"
            )
    if policy_names and len(set(policy_names)) != len(policy_names):
        return f"'policy_joint_names' names a policy joint twice: {list(policy_names)}"
    bad = [value for value in scale if not math.isfinite(value) or value == 0]
    if bad:
        return f"'joint_scale' entries must be finite and non-zero, got {bad}"
    if any(not math.isfinite(value) for value in offset):
        return f"'joint_offset' entries must be finite, got {list(offset)}"
    return None


@dataclass(frozen=True)
class JointMapping:
    """Robot units <-> policy units, joint by joint (robot joint order on both sides)."""

    policy_names: tuple[str, ...]
    scale: np.ndarray | None = None  # None: identity (no unit change)
    offset: np.ndarray | None = None

    @classmethod
    def of(
        cls,
        joint_names: Sequence[str],
        policy_names: Sequence[str] = (),
        scale: Sequence[float] = (),
        offset: Sequence[float] = (),
    ) -> JointMapping:
        problem = mapping_problem(joint_names, policy_names, scale, offset)
        if problem:
            raise ValueError(problem)
        units = bool(scale or offset) and not (
            all(s == 1 for s in scale) and all(o == 0 for o in offset)
        )
        count = len(joint_names)
        return cls(
            tuple(policy_names or joint_names),
            np.array(scale or [1.0] * count, dtype=np.float64) if units else None,
            np.array(offset or [0.0] * count, dtype=np.float64) if units else None,
        )

    @property
    def changes_units(self) -> bool:
        return self.scale is not None

    def to_policy(self, robot: np.ndarray) -> np.ndarray:
        """Positions (a vector, or rows of them) in robot units -> the policy's; velocities are
        scaled only."""
        if self.scale is None:
            return robot
        return np.asarray(robot, dtype=np.float64) * self.scale + self.offset

    def to_robot(self, policy: np.ndarray) -> np.ndarray:
        if self.scale is None:
            return policy
        return ((np.asarray(policy, dtype=np.float64) - self.offset) / self.scale).astype(
            np.asarray(policy).dtype
        )

    def state_to_policy(self, state: np.ndarray) -> np.ndarray:
        """The state vector: positions, then velocities when included (scaled, no offset)."""
        if self.scale is None:
            return state
        count = len(self.scale)
        state = np.asarray(state, dtype=np.float64)
        positions = state[:count] * self.scale + self.offset
        velocities = (
            state[count:] * self.scale[: len(state) - count]
            if len(state) > count
            else state[count:]
        )
        return np.concatenate([positions, velocities]).astype(np.float32)
