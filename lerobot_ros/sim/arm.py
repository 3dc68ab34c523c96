"""A simulated N-joint arm: joint dynamics and a camera view, no ROS.

The arm tracks its commanded positions with first-order dynamics under velocity and position
limits, like a position-controlled servo. The camera renders the arm from a fixed viewpoint with
the task's cube, so frames change whenever the joints move or a new episode places the cube.
Everything is deterministic given the seed and the sequence of commands and steps (no wall clock is
read here).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np

from lerobot_ros.sim.kinematics import Chain
from lerobot_ros.sim.so101 import (
    HOME_POSE,
    JOINT_LOWER_LIMITS,
    JOINT_UPPER_LIMITS,
    SO101_JOINT_NAMES,
)


@dataclass(frozen=True)
class ArmConfig:
    joint_names: tuple[str, ...] = SO101_JOINT_NAMES
    lower: tuple[float, ...] = JOINT_LOWER_LIMITS
    upper: tuple[float, ...] = JOINT_UPPER_LIMITS
    max_velocity: float = 3.0  # rad/s, every joint
    time_constant_s: float = 0.05  # first-order tracking lag
    initial: tuple[float, ...] = HOME_POSE

    def __post_init__(self) -> None:
        n = len(self.joint_names)
        for name in ("lower", "upper", "initial"):
            if len(getattr(self, name)) != n:
                raise ValueError(
                    f"{name} has {len(getattr(self, name))} values; the arm has {n} joints "
                    f"{list(self.joint_names)}"
                )
        if self.max_velocity <= 0 or self.time_constant_s <= 0:
            raise ValueError(
                f"max_velocity ({self.max_velocity}) and time_constant_s ({self.time_constant_s}) "
                "must be positive"
            )

    @classmethod
    def for_joints(cls, joint_names: tuple[str, ...], **overrides) -> ArmConfig:
        """Defaults resized to any number of joints (the SO-101 values repeat)."""
        n = len(joint_names)
        base = cls()
        sized = {
            name: tuple(np.resize(getattr(base, name), n).tolist())
            for name in ("lower", "upper", "initial")
        }
        return cls(joint_names=tuple(joint_names), **{**sized, **overrides})


@dataclass
class SimulatedArm:
    config: ArmConfig
    position: np.ndarray = field(init=False)
    velocity: np.ndarray = field(init=False)
    target: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        self._lower = np.array(self.config.lower)
        self._upper = np.array(self.config.upper)
        self.reset()

    def reset(self) -> None:
        """Back at the initial pose, at rest, targeting it (a new episode)."""
        self.position = np.array(self.config.initial, dtype=np.float64)
        self.velocity = np.zeros_like(self.position)
        self.target = self.position.copy()

    def command(self, positions: np.ndarray) -> None:
        """A new position target; out-of-range targets are clipped like a servo's limits."""
        positions = np.asarray(positions, dtype=np.float64)
        if positions.shape != self.position.shape:
            raise ValueError(
                f"command has {positions.shape[0] if positions.ndim else 0} values; the arm has "
                f"{self.position.size} joints"
            )
        if not np.isfinite(positions).all():
            raise ValueError(f"command is not finite: {positions.tolist()}")
        self.target = np.clip(positions, self._lower, self._upper)

    def step(self, dt: float) -> None:
        desired = (self.target - self.position) / max(self.config.time_constant_s, dt)
        self.velocity = np.clip(desired, -self.config.max_velocity, self.config.max_velocity)
        self.position = np.clip(self.position + self.velocity * dt, self._lower, self._upper)


class ArmCamera:
    """Renders the arm as a planar chain seen from the side (``kinematics.Chain``), plus the task's
    cube."""

    def __init__(self, height: int, width: int, seed: int = 0, viewpoint: int = 0) -> None:
        if height < 16 or width < 16:
            raise ValueError(f"camera resolution {height}x{width} is too small; at least 16x16")
        self.height, self.width = height, width
        self._chain = Chain(height, width)
        rng = np.random.default_rng(seed + 1000 * viewpoint)
        self._cube_color = tuple(int(c) for c in rng.integers(40, 255, 3))
        self._mirror = viewpoint % 2 == 1
        self._background = self._draw_background(rng)

    def _draw_background(self, rng: np.random.Generator) -> np.ndarray:
        image = np.empty((self.height, self.width, 3), np.uint8)
        horizon = int(self.height * 0.7)
        image[:horizon] = (200, 210, 225)  # wall
        image[horizon:] = (150, 120, 90)  # table
        noise = rng.integers(-8, 9, (self.height, self.width, 1))
        return np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8)

    def render(self, position: np.ndarray, cube: tuple[float, float]) -> np.ndarray:
        """An RGB frame of the arm at ``position`` (radians, SO-101 joint order) and the cube at
        ``cube``.

        ``cube`` is the cube's centre in pixels of this frame, as the task
        places it (``task.cube_position``).
        """
        image = self._background.copy()
        scale = min(self.height, self.width)
        size = max(3, scale // 12)
        x0, y0 = int(round(cube[0])), int(round(cube[1]))
        cv2.rectangle(image, (x0 - size, y0 - size), (x0 + size, y0 + size), self._cube_color, -1)

        q = np.resize(np.asarray(position, dtype=np.float64), 6)
        roll, grip = q[4], q[5]
        points, direction = self._chain.points(q)
        base = points[0]
        thickness = max(2, scale // 30)
        colors = [(60, 60, 70), (230, 120, 40), (40, 120, 230)]
        for start, end, color in zip(points, points[1:], colors, strict=False):
            cv2.line(image, _pixel(start), _pixel(end), color, thickness, cv2.LINE_AA)
        for point in points[:-1]:
            cv2.circle(image, _pixel(point), thickness, (20, 20, 20), -1, cv2.LINE_AA)
        # Gripper: two fingers whose spread follows the gripper joint and
        # whose orientation follows the wrist roll.
        tip = points[-1]
        spread = (0.2 + grip) * 0.06 * scale
        normal = np.array([-math.sin(direction), -math.cos(direction)]) * math.cos(roll)
        for sign in (-1, 1):
            finger = tip + normal * spread * sign
            cv2.line(
                image,
                _pixel(tip),
                _pixel(finger),
                (200, 40, 40),
                max(1, thickness // 2),
                cv2.LINE_AA,
            )
        cv2.rectangle(
            image,
            _pixel(base - [scale * 0.05, 0]),
            _pixel(base + [scale * 0.05, scale * 0.04]),
            (50, 50, 50),
            -1,
        )
        return image[:, ::-1].copy() if self._mirror else image


def _pixel(point: np.ndarray) -> tuple[int, int]:
    return int(round(point[0])), int(round(point[1]))
