"""Declarative parameter tables: each node parameter is written once, as one entry.

Invariant: a node's parameters (name, type, default, description, checks, whether it may change
while running) live in one table; its frozen settings dataclass is derived from that table, its
validation reports every problem at once before the node does anything, and ``config/*.yaml`` and
the node pages (docs/reference/nodes/) are checked against it. Rules that relate several parameters
are named functions listed next to the table. A ``runtime`` entry may change while the node runs:
``runtime_change`` checks a change with the same checks and rules as at start-up, and refuses any
other entry with "takes effect only at start-up". Plain Python (no rclpy): ``node_support``
declares a table on a node and routes ``ros2 param set`` here.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, make_dataclass, replace
from typing import Any, ClassVar

from lerobot_ros.protocol.contract import CLIENT_ID_PATTERN

#: A check of one value: (parameter name, converted value) -> the problem, or None.
Check = Callable[[str, Any], "str | None"]
#: A cross-field rule: the (converted, not yet validated) settings -> the problem, or None.
Rule = Callable[[Any], "str | None"]


def _is_list_of(value: Any, accepts: Callable[[Any], bool]) -> bool:
    # rclpy hands DOUBLE_ARRAY values over as array.array('d').
    return (
        isinstance(value, (Sequence, array))
        and not isinstance(value, str)
        and all(accepts(v) for v in value)
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class ValueType:
    """How values of one ROS parameter type are declared, accepted and converted."""

    label: str  # in problems: "expected a float"
    ros_type: str  # the name of the rclpy ``Parameter.Type`` member
    python_type: Any  # the settings field's annotation
    accepts: Callable[[Any], bool]
    convert: Callable[[Any], Any]


BOOL = ValueType("a boolean", "BOOL", bool, lambda v: isinstance(v, bool), bool)
INTEGER = ValueType(
    "an integer", "INTEGER", int, lambda v: _is_number(v) and isinstance(v, int), int
)
#: Integers are accepted (ROS itself refuses them for a DOUBLE parameter).
FLOAT = ValueType("a number", "DOUBLE", float, _is_number, float)
STRING = ValueType("a string", "STRING", str, lambda v: isinstance(v, str), str)
#: ROS 2 cannot infer the type of an empty list, so a string list defaults to
#: [""], meaning "not set": empty strings are placeholders and are dropped.
STRING_LIST = ValueType(
    "a list of strings",
    "STRING_ARRAY",
    tuple[str, ...],
    lambda v: _is_list_of(v, lambda item: isinstance(item, str)),
    lambda v: tuple(item for item in v if item),
)
FLOAT_LIST = ValueType(
    "a list of numbers",
    "DOUBLE_ARRAY",
    tuple[float, ...],
    lambda v: _is_list_of(v, _is_number),
    lambda v: tuple(float(item) for item in v),
)


@dataclass(frozen=True)
class Parameter:
    """One entry of a node's parameter table."""

    name: str
    type: ValueType
    #: The ROS default, as config/*.yaml and the node pages show it (string lists: [""]).
    default: Any
    description: str
    checks: tuple[Check, ...] = ()
    #: Settable while the node runs (``ros2 param set``), applied by the node at once.
    runtime: bool = False

    @property
    def declared_by_type(self) -> bool:
        """ROS 2 infers [] as a byte array: an empty-list default is declared by its type."""
        return isinstance(self.default, list) and not self.default


# ---------------------------------------------------------------- checks


def _check(ok: Callable[[Any], bool], expected: str) -> Check:
    def check(name: str, value: Any) -> str | None:
        return None if ok(value) else f"'{name}' is {value!r}, expected {expected}"

    return check


def positive() -> Check:
    """A finite number above 0."""
    return _check(lambda v: math.isfinite(v) and v > 0, "a finite number more than 0")


def more_than(bound: float) -> Check:
    """Above ``bound``; infinity passes (it disables a timeout)."""
    return _check(lambda v: v > bound, f"more than {bound}")


def at_least(bound: float, expected: str | None = None) -> Check:
    """``bound`` or more (NaN fails); ``expected`` says what the values mean."""
    return _check(lambda v: v >= bound, expected or f"{bound} or more")


def in_range(low: float, high: float, expected: str | None = None) -> Check:
    """From ``low`` to ``high``, both included."""
    return _check(lambda v: low <= v <= high, expected or f"{low}..{high}")


def port() -> Check:
    """A TCP port number, or 0 for off."""
    return in_range(0, 65535, "0 (off) or a port number")


def one_of(choices: Collection[str]) -> Check:
    return _check(lambda v: v in choices, f"one of {list(choices)}")


def each_one_of(choices: Collection[str]) -> Check:
    """Every item of a list is one of ``choices``."""

    def check(name: str, values: Sequence[str]) -> str | None:
        wrong = [value for value in values if value not in choices]
        return (
            f"'{name}' has {wrong}, expected each to be one of {list(choices)}" if wrong else None
        )

    return check


def matches(pattern: re.Pattern[str], expected: str) -> Check:
    return _check(lambda v: pattern.fullmatch(v) is not None, expected)


def ros_name_segment() -> Check:
    """One segment of a ROS name: letters, digits and underscores, starting with a letter."""
    return matches(CLIENT_ID_PATTERN, "one ROS name segment")


def absolute_name(example: str) -> Check:
    return _check(lambda v: v.startswith("/"), f"an absolute name like {example}")


def required(hint: str = "") -> Check:
    """Not empty (a string, or a list once its placeholders are dropped)."""

    def check(name: str, value: Any) -> str | None:
        return None if len(value) else f"'{name}' is empty" + (f": {hint}" if hint else "")

    return check


def distinct(item: str) -> Check:
    """No item of a list twice; ``item`` names what the list holds (joint, camera)."""

    def check(name: str, values: Sequence[str]) -> str | None:
        return (
            None
            if len(set(values)) == len(values)
            else f"'{name}' {list(values)} names a {item} twice"
        )

    return check


def no_nan(hint: str = "") -> Check:
    """No NaN in a list of numbers."""

    def check(name: str, values: Sequence[float]) -> str | None:
        return (
            f"'{name}' contains NaN" + (f"; {hint}" if hint else "")
            if any(map(math.isnan, values))
            else None
        )

    return check


def optional(check: Check) -> Check:
    """``check``, except that an empty value ("not set") passes."""
    return lambda name, value: check(name, value) if len(value) else None


# ------------------------------------------------------------- settings


class InvalidParameters(ValueError):
    """Parameters a node cannot start with; ``problems`` lists every one."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid parameters: " + "; ".join(problems))
        self.problems = problems


def table_problems(
    settings: Any, parameters: Iterable[Parameter], rules: Iterable[Rule]
) -> list[str]:
    """What the checks of ``parameters`` and the ``rules`` find wrong with ``settings``."""
    problems = [
        problem
        for entry in parameters
        for check in entry.checks
        if (problem := check(entry.name, getattr(settings, entry.name))) is not None
    ]
    return problems + [problem for rule in rules if (problem := rule(settings)) is not None]


class Settings:
    """Behaviour of every settings class that ``settings_dataclass`` derives from a table."""

    PARAMETERS: ClassVar[tuple[Parameter, ...]]
    RULES: ClassVar[tuple[Rule, ...]]

    @classmethod
    def converted(cls, values: Mapping[str, Any]) -> tuple[Any, list[str]]:
        """(settings, []) from ROS values (defaults for the missing), or (None, type problems)."""
        known = {entry.name for entry in cls.PARAMETERS}
        problems = [
            f"'{name}' is not a parameter of this node" for name in values if name not in known
        ]
        fields = {}
        for entry in cls.PARAMETERS:
            value = values.get(entry.name, entry.default)
            if entry.type.accepts(value):
                fields[entry.name] = entry.type.convert(value)
            else:
                problems.append(f"'{entry.name}' is {value!r}, expected {entry.type.label}")
        return (None, problems) if problems else (cls(**fields), [])

    @classmethod
    def problems_of(cls, values: Mapping[str, Any]) -> list[str]:
        """Every problem with ``values`` at once; [] when they make valid settings."""
        settings, problems = cls.converted(values)
        return problems if settings is None else settings.problems()

    @classmethod
    def from_values(cls, values: Mapping[str, Any]):
        """Validated settings from ROS values; InvalidParameters lists every problem."""
        settings, problems = cls.converted(values)
        problems = problems or settings.problems()
        if problems:
            raise InvalidParameters(problems)
        return settings

    def problems(self) -> list[str]:
        """What the table's checks and rules find wrong with these settings."""
        return table_problems(self, self.PARAMETERS, self.RULES)


def settings_dataclass(parameters: tuple[Parameter, ...], rules: tuple[Rule, ...] = ()) -> type:
    """A frozen dataclass with one field per parameter, to subclass as a node's settings."""
    names = [entry.name for entry in parameters]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"parameters declared twice: {twice}")
    return make_dataclass(
        "TableSettings",
        [(entry.name, entry.type.python_type) for entry in parameters],
        bases=(Settings,),
        namespace={"PARAMETERS": parameters, "RULES": rules},
        frozen=True,
    )


#: The refusal of a change to an entry that is read once, when the node starts (or is configured).
STARTUP_ONLY = "takes effect only at start-up"


def runtime_change(
    current: Settings, changes: Mapping[str, Any], configuring: bool = False
) -> tuple[Any, str]:
    """(new settings, "") for ``changes`` applied to ``current``, or (None, the refusal).

    ``changes`` maps names to ROS values; names outside the table are not this
    table's business and pass (e.g. use_sim_time). A start-up-only entry is
    refused unless ``configuring`` (a lifecycle node that is unconfigured reads
    its parameters at its next configure). The new settings pass the same
    checks and cross-field rules as at start-up; every problem is named.
    """
    table = {entry.name: entry for entry in current.PARAMETERS}
    converted, problems = {}, []
    for name, value in changes.items():
        entry = table.get(name)
        if entry is None:
            continue
        if not (entry.runtime or configuring):
            settable = sorted(e.name for e in current.PARAMETERS if e.runtime)
            problems.append(
                f"'{name}' {STARTUP_ONLY}; set it in the parameters file or on the command line"
                f" (settable while running: {', '.join(settable) or 'none'})"
            )
        elif not entry.type.accepts(value):
            problems.append(f"'{name}' is {value!r}, expected {entry.type.label}")
        else:
            converted[name] = entry.type.convert(value)
    if problems:
        return None, "; ".join(problems)
    changed = replace(current, **converted)
    problems = changed.problems()
    return (None, "; ".join(problems)) if problems else (changed, "")


def defaults(parameters: Iterable[Parameter]) -> dict[str, Any]:
    """name -> ROS default: what config/*.yaml lists."""
    return {entry.name: entry.default for entry in parameters}
