"""node_support.declare_settings: a table declared on a real rclpy node, read back as settings,
changed by set."""

from __future__ import annotations

import pytest
import rclpy
from rclpy.parameter import Parameter as RosParameter

from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.node_shell.node_support import (
    DeclaredParameters,
    NodeStartupError,
    declare_settings,
    parameter_table,
)
from lerobot_ros.node_shell.parameters import (
    FLOAT_LIST,
    INTEGER,
    STRING_LIST,
    Parameter,
    in_range,
    settings_dataclass,
)

TABLE = (
    Parameter("names", STRING_LIST, [""], "ordered names"),
    Parameter("limits", FLOAT_LIST, [], "per-name limits"),
    Parameter("count", INTEGER, 3, "how many", (in_range(1, 10),), runtime=True),
)


class Example(settings_dataclass(TABLE)):
    """A node's settings."""


@pytest.fixture
def make_node():
    context = rclpy.Context()
    rclpy.init(context=context)
    nodes = []

    def make(**overrides):
        overrides = [RosParameter(name, value=value) for name, value in overrides.items()]
        nodes.append(
            rclpy.create_node(
                f"settings_test_{len(nodes)}", context=context, parameter_overrides=overrides
            )
        )
        return nodes[-1]

    yield make
    for node in nodes:
        node.destroy_node()
    rclpy.shutdown(context=context)


def test_defaults_are_declared_with_their_descriptions_and_when_they_take_effect(make_node):
    node = make_node()
    settings = declare_settings(node, Example)
    assert settings == Example(names=(), limits=(), count=3)
    names, limits, count = node.describe_parameters(["names", "limits", "count"])
    assert (names.description, names.additional_constraints) == (
        "ordered names",
        "takes effect only at start-up",
    )
    assert count.additional_constraints == "settable while running"
    # An empty float list is declared by its type: ROS 2 would infer [] as a byte array.
    assert limits.type == RosParameter.Type.DOUBLE_ARRAY.value


def test_set_values_are_converted(make_node):
    node = make_node(names=["a", "b"], limits=[0.5, 1.5], count=4)
    assert declare_settings(node, Example) == Example(names=("a", "b"), limits=(0.5, 1.5), count=4)


def test_a_wrong_type_names_the_parameter_and_the_expected_type(make_node):
    with pytest.raises(
        NodeStartupError,
        match=r"parameter 'limits' has the wrong type .*expected a list of numbers",
    ):
        declare_settings(make_node(limits=[1, 2]), Example)


def test_invalid_values_are_one_startup_error_listing_every_problem(make_node):
    with pytest.raises(
        NodeStartupError, match=r"^invalid parameters: 'count' is 0, expected 1\.\.10$"
    ):
        declare_settings(make_node(count=0), Example)


def test_context_reaches_the_settings(make_node):
    node = make_node(joint_names=["a"])
    settings = declare_settings(node, ExecutorSettings, node_namespace="/left/arm", hostname="pc")
    assert settings.client_id == "pc_left_arm"


def test_a_set_is_refused_with_the_reason_or_applied_once_valid(make_node):
    node = make_node()
    declare_settings(node, Example)
    applied = []
    parameter_table(node).on_change(applied.append)

    startup_only, invalid, wrong_type = node.set_parameters(
        [
            RosParameter("names", value=["x"]),
            RosParameter("count", value=11),
            RosParameter("count", value=2.5),
        ]
    )
    assert (
        not startup_only.successful
        and "'names' takes effect only at start-up" in startup_only.reason
    )
    assert (invalid.successful, invalid.reason) == (False, "'count' is 11, expected 1..10")
    # rclpy's own check
    assert not wrong_type.successful and "Wrong parameter type" in wrong_type.reason
    assert applied == [] and node.get_parameter("count").value == 3

    assert node.set_parameters([RosParameter("count", value=5)])[0].successful
    assert (
        applied == [Example(names=(), limits=(), count=5)]
        and parameter_table(node).current.count == 5
    )


def test_start_up_entries_are_settable_while_configuring(make_node):
    node = make_node()
    table = DeclaredParameters(node, Example)
    table.on_change(
        lambda settings: pytest.fail("nothing applies while configuring"), configuring=lambda: True
    )
    assert node.set_parameters([RosParameter("names", value=["a"])])[0].successful
    assert table.settings().names == ("a",)
