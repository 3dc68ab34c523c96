"""node_support.declare_settings: a table declared on a real rclpy node, read back as settings."""

from __future__ import annotations

import pytest
import rclpy
from rclpy.parameter import Parameter as RosParameter

from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.node_support import NodeStartupError, declare_settings, read_settings
from lerobot_ros.parameters import FLOAT_LIST, INTEGER, STRING_LIST, Parameter, in_range, settings_dataclass

TABLE = (
    Parameter("names", STRING_LIST, [""], "ordered names"),
    Parameter("limits", FLOAT_LIST, [], "per-name limits"),
    Parameter("count", INTEGER, 3, "how many", (in_range(1, 10),), read_only=False),
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
        nodes.append(rclpy.create_node(f"settings_test_{len(nodes)}", context=context, parameter_overrides=overrides))
        return nodes[-1]

    yield make
    for node in nodes:
        node.destroy_node()
    rclpy.shutdown(context=context)


def test_defaults_are_declared_with_their_descriptions_and_read_only_flags(make_node):
    node = make_node()
    settings = declare_settings(node, Example)
    assert settings == Example(names=(), limits=(), count=3)
    names, limits, count = node.describe_parameters(["names", "limits", "count"])
    assert (names.description, names.read_only) == ("ordered names", True)
    assert count.read_only is False
    # An empty float list is declared by its type: ROS 2 would infer [] as a byte array.
    assert limits.type == RosParameter.Type.DOUBLE_ARRAY.value


def test_set_values_are_converted(make_node):
    node = make_node(names=["a", "b"], limits=[0.5, 1.5], count=4)
    assert declare_settings(node, Example) == Example(names=("a", "b"), limits=(0.5, 1.5), count=4)


def test_a_wrong_type_names_the_parameter_and_the_expected_type(make_node):
    with pytest.raises(NodeStartupError, match=r"parameter 'limits' has the wrong type .*expected a list of numbers"):
        declare_settings(make_node(limits=[1, 2]), Example)


def test_invalid_values_are_one_startup_error_listing_every_problem(make_node):
    with pytest.raises(NodeStartupError, match=r"^invalid parameters: 'count' is 0, expected 1\.\.10$"):
        declare_settings(make_node(count=0), Example)


def test_context_reaches_the_settings(make_node):
    node = make_node(joint_names=["a"])
    settings = declare_settings(node, ExecutorSettings, node_namespace="/left/arm", hostname="pc")
    assert settings.client_id == "pc_left_arm"


def test_read_settings_re_reads_the_declared_parameters_as_they_are_now(make_node):
    """A managed node validates on every configure: the values set since are read, and checked."""
    node = make_node()
    declare_settings(node, Example)
    assert read_settings(node, Example) == Example(names=(), limits=(), count=3), "unset typed lists: defaults"
    node.set_parameters([RosParameter("count", value=7)])
    assert read_settings(node, Example).count == 7
    node.set_parameters([RosParameter("count", value=11)])
    with pytest.raises(NodeStartupError, match=r"^invalid parameters: 'count' is 11, expected 1\.\.10$"):
        read_settings(node, Example)
