"""What every lerobot_ros node shares: parameter tables and the main loop.

Each node declares its parameters from one table of ``ParameterSpec`` entries, so
the defaults, types and descriptions live in one place that the README and
config files can be checked against.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rclpy
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node


@dataclass(frozen=True)
class ParameterSpec:
    name: str
    default: Any
    description: str
    read_only: bool = True


def declare_parameters(node: Node, table: tuple[ParameterSpec, ...]) -> dict[str, Any]:
    """Declare every parameter of ``table`` on ``node``; return name -> value."""
    values = {}
    for entry in table:
        descriptor = ParameterDescriptor(description=entry.description, read_only=entry.read_only)
        values[entry.name] = node.declare_parameter(entry.name, entry.default, descriptor).value
    return values


def declared_strings(values: list[str]) -> tuple[str, ...]:
    """A string-list parameter without its placeholders.

    ROS 2 cannot infer the type of an empty list, so string lists are
    declared with the default [""], which means "not set".
    """
    return tuple(value for value in values if value)


class NodeStartupError(RuntimeError):
    """The node cannot start; the message says why, for the operator."""


def run_node(make_node: Callable[[], Node], args: list[str] | None = None) -> int:
    """Init rclpy, build the node, spin until shutdown; return an exit code.

    A NodeStartupError is reported as one clear line and exit code 1. SIGINT
    and SIGTERM end the node cleanly, also while it is still starting up.
    """
    rclpy.init(args=args if args is not None else sys.argv)
    node = None
    try:
        node = make_node()
        if rclpy.ok():  # not interrupted while starting up
            rclpy.spin(node)
    except NodeStartupError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        # SIGTERM during start-up shuts the context down under the node's
        # feet; the next entity it creates then fails. That is a shutdown,
        # not a crash.
        if rclpy.ok():
            raise
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0
