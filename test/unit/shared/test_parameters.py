"""lerobot_ros.node_shell.parameters: checks, type conversion, all-at-once problems, derived
settings."""

from __future__ import annotations

import dataclasses
import math
import re
import subprocess
import sys
from array import array

import pytest

from lerobot_ros.node_shell.parameters import (
    BOOL,
    FLOAT,
    FLOAT_LIST,
    INTEGER,
    STRING,
    STRING_LIST,
    InvalidParameters,
    Parameter,
    absolute_name,
    at_least,
    defaults,
    distinct,
    each_one_of,
    in_range,
    matches,
    more_than,
    no_nan,
    one_of,
    optional,
    port,
    positive,
    required,
    ros_name_segment,
    runtime_change,
    settings_dataclass,
)

# ------------------------------------------------------------------ checks


def test_positive_wants_a_finite_number_above_zero():
    assert positive()("fps", 30.0) is None
    for value in (0.0, -1.0, math.inf, math.nan):
        assert (
            positive()("fps", value) == f"'fps' is {value!r}, expected a finite number more than 0"
        )


def test_more_than_lets_infinity_through_and_refuses_nan():
    assert more_than(0)("t", math.inf) is None
    assert more_than(0)("t", 0.0) == "'t' is 0.0, expected more than 0"
    assert more_than(0)("t", math.nan) is not None


def test_at_least_and_in_range_include_their_bounds_and_say_what_the_values_mean():
    assert at_least(0)("n", 0) is None
    assert at_least(1)("n", 0) == "'n' is 0, expected 1 or more"
    assert (
        at_least(-1, "-1 (off) or a seed >= 0")("seed", -2)
        == "'seed' is -2, expected -1 (off) or a seed >= 0"
    )
    assert at_least(0)("x", math.nan) is not None
    assert in_range(1, 100)("q", 1) is None and in_range(1, 100)("q", 100) is None
    assert in_range(1, 100)("q", 101) == "'q' is 101, expected 1..100"
    assert (
        in_range(0, 100, "0 (raw) or 1..100")("q", -1) == "'q' is -1, expected 0 (raw) or 1..100"
    )


def test_port_is_zero_for_off_or_a_tcp_port():
    assert port()("p", 0) is None and port()("p", 65535) is None
    assert port()("p", 65536) == "'p' is 65536, expected 0 (off) or a port number"
    assert port()("p", -1) is not None


def test_choices_single_and_per_item():
    assert one_of(("a", "b"))("mode", "a") is None
    assert one_of(("a", "b"))("mode", "c") == "'mode' is 'c', expected one of ['a', 'b']"
    assert each_one_of(("raw", "compressed"))("t", ("raw",)) is None
    assert each_one_of(("raw", "compressed"))("t", ("raw", "h264")) == (
        "'t' has ['h264'], expected each to be one of ['raw', 'compressed']"
    )


def test_name_checks():
    assert ros_name_segment()("s", "act_so101") is None
    for bad in ("1abc", "a/b", "a-b", "a\n"):
        assert ros_name_segment()("s", bad) == f"'s' is {bad!r}, expected one ROS name segment"
    assert absolute_name("/lerobot")("ns", "/x") is None
    assert (
        absolute_name("/lerobot")("ns", "x")
        == "'ns' is 'x', expected an absolute name like /lerobot"
    )
    device = matches(re.compile(r"cpu|cuda(:\d+)?"), "cpu or cuda:N")
    assert device("d", "cuda:1") is None
    assert device("d", "gpu") == "'d' is 'gpu', expected cpu or cuda:N"


def test_list_checks():
    assert required()("j", ()) == "'j' is empty"
    assert required("list the joints")("j", "") == "'j' is empty: list the joints"
    assert required()("j", ("a",)) is None
    assert distinct("joint")("j", ("a", "b", "a")) == "'j' ['a', 'b', 'a'] names a joint twice"
    assert distinct("joint")("j", ()) is None
    assert no_nan("use .inf")("l", (1.0, math.inf)) is None
    assert no_nan("use .inf")("l", (math.nan,)) == "'l' contains NaN; use .inf"


def test_optional_skips_an_empty_value_only():
    check = optional(ros_name_segment())
    assert check("s", "") is None
    assert check("s", "a/b") is not None


# ------------------------------------------------------------------ types


def test_types_accept_and_convert_what_ros_hands_over():
    assert STRING_LIST.convert(["", "a", ""]) == ("a",)
    assert FLOAT_LIST.convert(array("d", [1.0, 2.0])) == (1.0, 2.0)
    assert (
        FLOAT_LIST.accepts(array("d", [1.0]))
        and FLOAT_LIST.accepts([1, 2.0])
        and FLOAT_LIST.accepts([])
    )
    assert (
        not FLOAT_LIST.accepts(["a"])
        and not FLOAT_LIST.accepts("ab")
        and not FLOAT_LIST.accepts([True])
    )
    assert FLOAT.accepts(1) and FLOAT.convert(1) == 1.0 and isinstance(FLOAT.convert(1), float)
    assert not FLOAT.accepts(True) and not FLOAT.accepts("1")
    assert INTEGER.accepts(3) and not INTEGER.accepts(3.0) and not INTEGER.accepts(False)
    assert BOOL.accepts(False) and not BOOL.accepts(0)
    assert STRING.accepts("") and not STRING.accepts(1)
    assert not STRING_LIST.accepts("abc") and not STRING_LIST.accepts([1])


def test_only_an_empty_list_default_is_declared_by_its_type():
    # ROS 2 infers [] as a byte array; [""] and non-empty lists infer fine.
    assert Parameter("l", FLOAT_LIST, [], "").declared_by_type
    assert not Parameter("s", STRING_LIST, [""], "").declared_by_type
    assert not Parameter("f", FLOAT, 0.0, "").declared_by_type


# --------------------------------------------------------------- settings


def lows_not_above_highs(settings) -> str | None:
    return "'low' is above 'high'" if settings.low > settings.high else None


TABLE = (
    Parameter("name", STRING, "", "what", (required(),)),
    Parameter("low", FLOAT, 0.0, "lower", (at_least(0),), runtime=True),
    Parameter("high", FLOAT, 1.0, "upper", (positive(),), runtime=True),
    Parameter("items", STRING_LIST, [""], "items", (distinct("item"),)),
    Parameter("limits", FLOAT_LIST, [], "limits"),
    Parameter("count", INTEGER, 3, "count", (in_range(1, 10),), runtime=True),
    Parameter("flag", BOOL, False, "flag"),
)


class Example(settings_dataclass(TABLE, (lows_not_above_highs,))):
    """A settings class as a node declares one."""

    @property
    def span(self) -> float:
        return self.high - self.low


def test_the_dataclass_has_one_frozen_field_per_parameter_in_table_order():
    assert [field.name for field in dataclasses.fields(Example)] == [entry.name for entry in TABLE]
    assert Example.PARAMETERS is TABLE
    made = Example.from_values({"name": "x", "items": ["", "a", "b"], "limits": [1, 2]})
    assert (
        made.items == ("a", "b")
        and made.limits == (1.0, 2.0)
        and made.count == 3
        and made.span == 1.0
    )
    assert repr(made).startswith("Example(name='x'")
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.low = 0.5


def test_a_parameter_declared_twice_is_refused():
    with pytest.raises(ValueError, match=r"declared twice: \['a'\]"):
        settings_dataclass((Parameter("a", STRING, "", ""), Parameter("a", FLOAT, 0.0, "")))


def test_every_problem_is_reported_at_once_field_checks_then_rules():
    problems = Example.problems_of(
        {"name": "", "low": 5.0, "high": 2.0, "items": ["a", "a"], "count": 0}
    )
    assert problems == [
        "'name' is empty",
        "'items' ['a', 'a'] names a item twice",
        "'count' is 0, expected 1..10",
        "'low' is above 'high'",
    ]
    with pytest.raises(InvalidParameters) as raised:
        Example.from_values({"name": "", "low": 5.0, "high": 2.0})
    assert raised.value.problems == ["'name' is empty", "'low' is above 'high'"]
    assert str(raised.value) == "invalid parameters: 'name' is empty; 'low' is above 'high'"


def test_wrong_types_and_unknown_names_are_problems_before_any_check_runs():
    problems = Example.problems_of({"name": 3, "high": "big", "hgih": 1.0})
    assert problems == [
        "'hgih' is not a parameter of this node",
        "'name' is 3, expected a string",
        "'high' is 'big', expected a number",
    ]


def test_defaults_are_what_the_config_files_list():
    assert defaults(TABLE) == {
        "name": "",
        "low": 0.0,
        "high": 1.0,
        "items": [""],
        "limits": [],
        "count": 3,
        "flag": False,
    }
    assert Example.problems_of({"name": "x"}) == []


@pytest.mark.parametrize(
    "module",
    [
        "lerobot_ros.node_shell.parameters",
        "lerobot_ros.executor.settings",
        "lerobot_ros.sim.settings",
    ],
)
def test_parameter_tables_are_plain_python(module):
    code = f"import sys; import {module}; assert 'rclpy' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ---- changes while running --------------------------------------------------


def _running() -> Example:
    return Example.from_values({"name": "x"})


def test_a_valid_runtime_change_gives_the_new_settings_and_leaves_the_rest():
    changed, refusal = runtime_change(_running(), {"count": 7, "low": 0.5})
    assert refusal == "" and (changed.count, changed.low, changed.name) == (7, 0.5, "x")


def test_a_start_up_only_entry_is_refused_saying_so_and_naming_the_settable_ones():
    changed, refusal = runtime_change(_running(), {"name": "y"})
    assert changed is None
    assert refusal == (
        "'name' takes effect only at start-up; set it in the parameters file or on the command "
        "line "
        "(settable while running: count, high, low)"
    )


def test_a_start_up_only_entry_is_accepted_while_configuring():
    changed, refusal = runtime_change(_running(), {"name": "y"}, configuring=True)
    assert refusal == "" and changed.name == "y"


def test_an_invalid_runtime_value_is_refused_with_the_start_up_check_and_the_cross_field_rules():
    assert runtime_change(_running(), {"count": 0}) == (None, "'count' is 0, expected 1..10")
    assert runtime_change(_running(), {"low": 2.0}) == (None, "'low' is above 'high'")
    assert runtime_change(_running(), {"count": "many"}) == (
        None,
        "'count' is 'many', expected an integer",
    )


def test_names_outside_the_table_are_not_its_business():
    assert runtime_change(_running(), {"use_sim_time": True}) == (_running(), "")
