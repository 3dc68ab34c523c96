"""Joint limits a real robot must have before it moves: from parameters, or from its
robot_description URDF.

Invariants:

* with ``require_joint_limits`` (robot.launch.py sets it for a real robot,
  not with ``sim:=true``) the executor does not configure, so never
  activates, without a position limit for every joint: the refusal says the
  three ways on (parameters, a URDF with limits, the explicit opt-out);
* limits in parameters win; otherwise a published ``robot_description``
  gives them, joint by joint, by name, and only when it limits every joint;
* a URDF that does not parse, or limits only some joints, says which.

Plain Python (xml.etree): the node reads the topic (``sensor_node.read_latched``).
"""

from __future__ import annotations

from collections.abc import Sequence
from xml.etree import ElementTree

#: The refusal's way out, as the user writes it.
HOW = (
    "set joint_lower_limits and joint_upper_limits (radians, in joint order; config/robot.yaml "
    "has an example), "
    "publish robot_description (a URDF with a <limit lower upper> for every joint), or opt out "
    "explicitly with "
    "require_joint_limits:=false (robot.launch.py: allow_no_joint_limits:=true)"
)


def urdf_limits(urdf: str, joint_names: Sequence[str]) -> tuple[list[float], list[float]] | str:
    """(lower, upper) in ``joint_names`` order from a URDF's <limit> elements, or why there are
    none."""
    try:
        root = ElementTree.fromstring(urdf)
    except ElementTree.ParseError as error:
        return f"robot_description is not a URDF ({error})"
    found = {}
    for joint in root.iter("joint"):
        limit = joint.find("limit")
        if limit is not None and "lower" in limit.attrib and "upper" in limit.attrib:
            found[joint.get("name")] = (float(limit.get("lower")), float(limit.get("upper")))
    missing = [name for name in joint_names if name not in found]
    if missing:
        return f"robot_description has no position limits for {missing}"
    return [found[name][0] for name in joint_names], [found[name][1] for name in joint_names]


def limits_problem(
    required: bool,
    lower: Sequence[float],
    upper: Sequence[float],
    from_urdf: tuple[list[float], list[float]] | str | None,
) -> str | None:
    """Why the robot may not configure: limits required, none in parameters, none usable from the
    URDF; else None.

    ``from_urdf``: ``urdf_limits``'s answer, or None when no robot_description was published.
    """
    if not required or (lower and upper) or isinstance(from_urdf, tuple):
        return None
    heard = "no robot_description was published" if from_urdf is None else from_urdf
    return f"a real robot needs joint limits before it moves ({heard}): {HOW}"
