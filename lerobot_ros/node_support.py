"""What every lerobot_ros node shares: parameter tables and the main loop.

Each node declares its parameters from one table of ``ParameterSpec`` entries, so
the defaults, types and descriptions live in one place that the README and
config files can be checked against.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import rclpy
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.node import Node
from rclpy.parameter import Parameter


@dataclass(frozen=True)
class ParameterSpec:
    name: str
    default: Any
    description: str
    read_only: bool = True
    #: Declare with this type instead of inferring it from ``default``. Needed
    #: for empty lists: ROS 2 infers [] as a byte array, so a float list
    #: defaulting to [] is declared ``Parameter.Type.DOUBLE_ARRAY`` and reads
    #: as ``default`` when not set.
    value_type: Parameter.Type | None = None


def declare_parameters(node: Node, table: tuple[ParameterSpec, ...]) -> dict[str, Any]:
    """Declare every parameter of ``table`` on ``node``; return name -> value.

    A value of the wrong type (e.g. an integer list for a float list) is a
    NodeStartupError naming the parameter and the expected type.
    """
    values = {}
    for entry in table:
        descriptor = ParameterDescriptor(description=entry.description, read_only=entry.read_only)
        try:
            if entry.value_type is None:
                values[entry.name] = node.declare_parameter(entry.name, entry.default, descriptor).value
            else:
                value = node.declare_parameter(entry.name, entry.value_type, descriptor).value
                values[entry.name] = entry.default if value is None else value
        except InvalidParameterTypeException as error:
            expected = entry.value_type.name if entry.value_type is not None else type(entry.default).__name__
            raise NodeStartupError(f"parameter '{entry.name}' has the wrong type ({error}); expected {expected}") from error
    return values


def declare_validated(
    node: Node, table: tuple[ParameterSpec, ...], problems_of: Callable[[dict[str, Any]], list[str]]
) -> dict[str, Any]:
    """Declare ``table`` and check the values; every problem at once in one NodeStartupError."""
    params = declare_parameters(node, table)
    problems = problems_of(params)
    if problems:
        raise NodeStartupError("invalid parameters: " + "; ".join(problems))
    return params


def declared_strings(values: list[str]) -> tuple[str, ...]:
    """A string-list parameter without its placeholders.

    ROS 2 cannot infer the type of an empty list, so string lists are
    declared with the default [""], which means "not set".
    """
    return tuple(value for value in values if value)


class NodeStartupError(RuntimeError):
    """The node cannot start; the message says why, for the operator."""


class NodeDone(Exception):
    """The node finished its whole job during start-up (e.g. a check-only run): exit 0."""


def run_node(make_node: Callable[[], Node], args: list[str] | None = None) -> int:
    """Init rclpy, build the node, spin until SIGINT/SIGTERM; return an exit code.

    A NodeStartupError is reported as one clear line and exit code 1; a
    NodeDone raised from start-up ends the run with exit code 0. A
    signal during start-up (seconds of model loading) aborts it at once; a
    signal while serving calls the node's ``on_stop_requested()`` at once (it
    must only set flags), ends the spin loop and then calls its
    ``drain(spin_once)``, if it has one, while the context is still alive, so
    a node can finish in-flight work and publish its last messages.
    """
    rclpy.init(args=args if args is not None else sys.argv, signal_handler_options=SignalHandlerOptions.NO)
    stop_requested = threading.Event()
    serving = False

    def on_signal(signum, frame) -> None:
        if not serving:
            raise KeyboardInterrupt
        stop_requested.set()
        # Runs before the executor dispatches whatever woke it, so a node can
        # refuse new work at once (e.g. a session request that raced the signal).
        notify = getattr(node, "on_stop_requested", None)
        if notify is not None:
            notify()

    previous = {signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)}
    node = None
    executor = SingleThreadedExecutor()
    try:
        node = make_node()
        serving = True
        executor.add_node(node)
        while not stop_requested.is_set() and rclpy.ok():
            executor.spin_once(timeout_sec=0.1)
        drain = getattr(node, "drain", None)
        if drain is not None and rclpy.ok():
            drain(lambda: executor.spin_once(timeout_sec=0.05))
    except NodeStartupError as error:
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
    except NodeDone:
        return 0
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    return 0
