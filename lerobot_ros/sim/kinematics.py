"""Where the simulated arm's links are, in the front camera's image plane.

Invariant: ONE forward model of the arm, read by the camera (which draws
it), the task (which judges whether the gripper is at the cube) and the
scripted expert (whose inverse solution reaches that same point), so what
the camera shows, what counts as success and what the expert aims at can
never disagree. Coordinates are pixels of a ``height`` x ``width`` frame of
the side view, x to the right, y down; the planar chain is shoulder_lift,
elbow_flex, wrist_flex; shoulder_pan turns it out of the image plane (the
links shorten by cos(pan)).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Link lengths (upper arm, forearm, hand) as fractions of min(height, width).
LINK_FRACTIONS = (0.32, 0.28, 0.12)
#: The shoulder joint's place in the frame, as fractions of (width, height).
BASE_FRACTIONS = (0.3, 0.72)


@dataclass(frozen=True)
class Chain:
    """The arm's geometry in one frame size."""

    height: int
    width: int

    @property
    def scale(self) -> float:
        return float(min(self.height, self.width))

    @property
    def lengths(self) -> np.ndarray:
        return np.array(LINK_FRACTIONS) * self.scale

    def base(self, pan: float = 0.0) -> np.ndarray:
        return np.array(
            [
                self.width * (BASE_FRACTIONS[0] + 0.05 * math.sin(pan)),
                self.height * BASE_FRACTIONS[1],
            ]
        )

    def points(self, position) -> tuple[list[np.ndarray], float]:
        """Base, elbow, wrist and gripper tip (pixels), and the hand's angle (radians, y up)."""
        q = np.resize(np.asarray(position, dtype=np.float64), 6)
        pan, lift, elbow, wrist = q[:4]
        foreshorten = 0.35 + 0.65 * abs(math.cos(pan))
        angles = np.cumsum([math.pi / 2 - lift, -elbow, -wrist])
        points = [self.base(pan)]
        for length, angle in zip(self.lengths, angles, strict=False):
            points.append(
                points[-1] + np.array([math.cos(angle) * foreshorten, -math.sin(angle)]) * length
            )
        return points, float(angles[-1])

    def tip(self, position) -> np.ndarray:
        """The gripper tip (pixels)."""
        return self.points(position)[0][-1]

    def reach_down(self, tip: np.ndarray, lower, upper) -> tuple[float, float, float] | None:
        """(shoulder_lift, elbow_flex, wrist_flex) putting the tip at ``tip`` with the hand
        pointing down.

        Pan is 0. The elbow-up solution is preferred; None when neither
        solution is within the joint limits ``lower``/``upper`` (SO-101 order).
        """
        l1, l2, l3 = self.lengths
        base = self.base(0.0)
        # y up from here on; the hand points straight down, so the wrist is l3 above the tip.
        wx, wy = tip[0] - base[0], (base[1] - tip[1]) + l3
        distance = math.hypot(wx, wy)
        cos_elbow = (distance**2 - l1**2 - l2**2) / (2 * l1 * l2)
        if abs(cos_elbow) > 1.0:
            return None
        for sign in (1.0, -1.0):
            elbow = sign * math.acos(cos_elbow)
            # Absolute angles: a1 of the upper arm, a2 = a1 - elbow of the forearm, a3 = -pi/2.
            a1 = math.atan2(wy, wx) + math.atan2(l2 * math.sin(elbow), l1 + l2 * math.cos(elbow))
            lift = math.pi / 2 - a1
            wrist = (a1 - elbow) + math.pi / 2
            joints = (_wrap(lift), elbow, _wrap(wrist))
            if all(lower[i + 1] <= joints[i] <= upper[i + 1] for i in range(3)):
                return joints
        return None


def _wrap(angle: float) -> float:
    return (angle + math.pi) % (2 * math.pi) - math.pi
