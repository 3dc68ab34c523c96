"""The simulated arm in 3-D: its URDF and the link transforms for a joint state, no ROS.

Invariant: ONE joint table (``ArmDescription.joints``) makes both the URDF
that ``robot_description`` carries and the transforms the sim publishes on
``/tf``, so what rviz draws from the URDF and where tf puts the links cannot
disagree. Its geometry is the camera's chain (``kinematics.LINK_FRACTIONS``)
in metres, ``METRES_PER_SCALE`` per frame scale, and its joint limits are
``so101``'s: with the pan at 0 the 3-D elbow, wrist and gripper tip are the
side view's points (x forward = the image's x, z up = the image's -y);
``kinematics`` draws the pan as a stylised foreshortening, here it is a real
rotation about z, so the height of every point and its distance along the
arm's plane still match the side view. Joints are named as in
``joint_states`` (the node's ``joint_names``, in SO-101 order); links by
their role. Every joint origin has zero rotation, so a joint's transform is
its origin's translation and a rotation of ``q`` about its axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from xml.etree import ElementTree

import numpy as np

from lerobot_ros.sim.kinematics import LINK_FRACTIONS, Chain
from lerobot_ros.sim.so101 import JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS, SO101_JOINT_NAMES

#: Metres per unit of the camera's scale (min(height, width) pixels): the upper arm is 0.128 m.
METRES_PER_SCALE = 0.4
#: The shoulder_lift axis above the shoulder_pan joint (metres); the side view's chain starts
#: there.
SHOULDER_HEIGHT_M = 0.05
#: URDF requires an effort limit; the sim has no torque model, so this only fills the field (N m).
EFFORT_LIMIT = 10.0
ROBOT_NAME = "so101_sim"
BASE_LINK = "base_link"
TIP_LINK = "gripper_tip"
#: The task's cube, a child of the base link on /tf.
CUBE_FRAME = "cube"
#: Link names by role, parent before child: base, then one child link per SO-101 joint.
LINKS = (
    BASE_LINK,
    "shoulder_link",
    "upper_arm_link",
    "forearm_link",
    "wrist_link",
    "hand_link",
    "jaw_link",
)
_Y, _Z, _X = (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 0.0, 0.0)


@dataclass(frozen=True)
class Joint:
    name: str
    kind: str  # "revolute" or "fixed"
    parent: str
    child: str
    # the child's origin in the parent's frame at q = 0 (metres)
    origin: tuple[float, float, float]
    axis: tuple[float, float, float] = _Z
    lower: float = 0.0
    upper: float = 0.0


@dataclass(frozen=True)
class Transform:
    """``child``'s pose in ``parent``'s frame: translation (metres), quaternion (x, y, z, w)."""

    parent: str
    child: str
    translation: tuple[float, float, float]
    rotation: tuple[float, float, float, float]


@dataclass(frozen=True)
class ArmDescription:
    """The arm's joints (``joint_names`` in SO-101 order) with their limits; ``for_arm`` takes the
    sim's own."""

    joint_names: tuple[str, ...] = SO101_JOINT_NAMES
    lower: tuple[float, ...] = JOINT_LOWER_LIMITS
    upper: tuple[float, ...] = JOINT_UPPER_LIMITS
    max_velocity: float = 3.0

    def __post_init__(self) -> None:
        if len(self.joint_names) != len(SO101_JOINT_NAMES) or len(set(self.joint_names)) != len(
            self.joint_names
        ):
            raise ValueError(
                "the arm description needs 6 distinct joint names in SO-101 order; got "
                f"{list(self.joint_names)}"
            )
        if len(self.lower) != len(self.joint_names) or len(self.upper) != len(self.joint_names):
            raise ValueError(
                f"lower and upper need one limit per joint; got {len(self.lower)} and "
                f"{len(self.upper)}"
            )
        if self.max_velocity <= 0:
            raise ValueError(f"max_velocity must be positive, got {self.max_velocity}")

    @classmethod
    def for_arm(cls, config) -> ArmDescription:
        """The description of a simulated arm's ``ArmConfig``: its joint names, limits and velocity
        limit."""
        return cls(
            tuple(config.joint_names),
            tuple(config.lower),
            tuple(config.upper),
            config.max_velocity,
        )

    @property
    def link_lengths(self) -> tuple[float, float, float]:
        """Upper arm, forearm and hand (metres)."""
        return tuple(fraction * METRES_PER_SCALE for fraction in LINK_FRACTIONS)

    @cached_property
    def joints(self) -> tuple[Joint, ...]:
        upper_arm, forearm, hand = self.link_lengths
        origins = (
            (0.0, 0.0, 0.0),
            (0.0, 0.0, SHOULDER_HEIGHT_M),
            (0.0, 0.0, upper_arm),
            (0.0, 0.0, forearm),
            (0.0, 0.0, 0.0),
            (0.0, 0.0, hand * 0.5),
        )
        # pan turns about z; lift, elbow and wrist pitch about y (positive tilts the arm forward,
        # as the side view's angles do); roll turns the hand about its own axis; the gripper opens
        # the jaw about x.
        axes = (_Z, _Y, _Y, _Y, _Z, _X)
        moving = tuple(
            Joint(
                name,
                "revolute",
                LINKS[index],
                LINKS[index + 1],
                origins[index],
                axes[index],
                self.lower[index],
                self.upper[index],
            )
            for index, name in enumerate(self.joint_names)
        )
        tip = Joint(f"{TIP_LINK}_joint", "fixed", "hand_link", TIP_LINK, (0.0, 0.0, hand))
        return (*moving, tip)

    def transforms(self, position) -> tuple[list[Transform], list[Transform]]:
        """(moving, fixed): one transform per link but the base, moving ones at ``position`` (joint
        order)."""
        q = np.asarray(position, dtype=np.float64)
        if q.shape != (len(self.joint_names),) or not np.isfinite(q).all():
            raise ValueError(
                f"position must be {len(self.joint_names)} finite joint values; got "
                f"{np.asarray(position).tolist()}"
            )
        moving, fixed = [], []
        for index, joint in enumerate(self.joints):
            if joint.kind == "fixed":
                fixed.append(
                    Transform(joint.parent, joint.child, joint.origin, (0.0, 0.0, 0.0, 1.0))
                )
            else:
                moving.append(
                    Transform(
                        joint.parent,
                        joint.child,
                        joint.origin,
                        _quaternion(joint.axis, float(q[index])),
                    )
                )
        return moving, fixed

    def link_poses(self, position) -> dict[str, np.ndarray]:
        """Every link's 4x4 pose in the base frame at ``position``."""
        moving, fixed = self.transforms(position)
        poses = {BASE_LINK: np.eye(4)}
        # parents come first in both lists, fixed ones hang off moving ones
        for transform in (
            *moving,
            *fixed,
        ):
            poses[transform.child] = poses[transform.parent] @ _matrix(transform)
        return poses

    @cached_property
    def _visuals(self) -> dict[str, tuple[str, dict[str, str], tuple[float, float, float], str]]:
        """Per link: geometry, its attributes, its centre in the link's frame, material. Links
        along z from their origin."""
        upper_arm, forearm, hand = self.link_lengths
        visuals = {
            BASE_LINK: ("box", {"size": "0.1 0.1 0.02"}, (0.0, 0.0, -0.01), "grey"),
            "jaw_link": ("box", {"size": "0.006 0.012 0.024"}, (0.0, 0.008, 0.012), "red"),
        }
        for link, length, radius in (
            ("shoulder_link", SHOULDER_HEIGHT_M, 0.03),
            ("upper_arm_link", upper_arm, 0.02),
            ("forearm_link", forearm, 0.018),
            ("hand_link", hand, 0.012),
        ):
            visuals[link] = (
                "cylinder",
                {"radius": repr(radius), "length": repr(length)},
                (0.0, 0.0, length / 2),
                "orange",
            )
        return visuals

    def urdf(self) -> str:
        """The URDF text: links with simple visuals, the joint table with limits, axes and
        origins."""
        robot = ElementTree.Element("robot", name=ROBOT_NAME)
        for name, rgba in (
            ("orange", "0.9 0.47 0.16 1"),
            ("grey", "0.3 0.3 0.35 1"),
            ("red", "0.8 0.16 0.16 1"),
        ):
            ElementTree.SubElement(
                ElementTree.SubElement(robot, "material", name=name), "color", rgba=rgba
            )
        for link in (*LINKS, TIP_LINK):
            element = ElementTree.SubElement(robot, "link", name=link)
            if link in self._visuals:
                geometry, attributes, centre, material = self._visuals[link]
                visual = ElementTree.SubElement(element, "visual")
                ElementTree.SubElement(visual, "origin", xyz=_triple(centre), rpy="0 0 0")
                ElementTree.SubElement(
                    ElementTree.SubElement(visual, "geometry"), geometry, attributes
                )
                ElementTree.SubElement(visual, "material", name=material)
        for joint in self.joints:
            element = ElementTree.SubElement(robot, "joint", name=joint.name, type=joint.kind)
            ElementTree.SubElement(element, "parent", link=joint.parent)
            ElementTree.SubElement(element, "child", link=joint.child)
            ElementTree.SubElement(element, "origin", xyz=_triple(joint.origin), rpy="0 0 0")
            if joint.kind == "revolute":
                ElementTree.SubElement(element, "axis", xyz=_triple(joint.axis))
                ElementTree.SubElement(
                    element,
                    "limit",
                    lower=repr(joint.lower),
                    upper=repr(joint.upper),
                    velocity=repr(self.max_velocity),
                    effort=repr(EFFORT_LIMIT),
                )
        ElementTree.indent(robot)
        return '<?xml version="1.0"?>\n' + ElementTree.tostring(robot, encoding="unicode") + "\n"


def image_to_base(point_px, height: int, width: int) -> tuple[float, float, float]:
    """A point of the side view (pixels, pan 0) in the base frame (metres): where the cube frame
    goes."""
    chain = Chain(height, width)
    offset = (
        (np.asarray(point_px, dtype=np.float64) - chain.base(0.0)) / chain.scale * METRES_PER_SCALE
    )
    return float(offset[0]), 0.0, float(SHOULDER_HEIGHT_M - offset[1])


def cube_transform(cube_px, height: int, width: int) -> Transform:
    """The task's cube (its centre in the side view's pixels, as ``task.cube_position`` places it)
    on /tf."""
    return Transform(
        BASE_LINK, CUBE_FRAME, image_to_base(cube_px, height, width), (0.0, 0.0, 0.0, 1.0)
    )


def _quaternion(axis, angle: float) -> tuple[float, float, float, float]:
    s = math.sin(angle / 2)
    return (axis[0] * s, axis[1] * s, axis[2] * s, math.cos(angle / 2))


def _matrix(transform: Transform) -> np.ndarray:
    x, y, z, w = transform.rotation
    matrix = np.eye(4)
    matrix[:3, :3] = [
        [1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
        [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
        [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)],
    ]
    matrix[:3, 3] = transform.translation
    return matrix


def _triple(values) -> str:
    return " ".join(repr(float(value)) for value in values)
