"""What every lerobot_ros node shares: declaring its parameter table, and the main loop.

Invariant: a node reads its parameters only through ``declare_settings``,
which declares every entry of its table (description, read-only) and hands
back validated settings, or stops the start-up with one message naming every
problem. The table itself is plain Python (lerobot_ros.parameters).
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import rclpy
from rclpy.signals import SignalHandlerOptions
from rcl_interfaces.msg import ParameterDescriptor
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.experimental import EventsExecutor
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.node import Node
from rclpy.parameter import Parameter as RosParameter

from lerobot_ros.parameters import InvalidParameters, Parameter, Settings

SettingsT = TypeVar("SettingsT", bound=Settings)


def declare_settings(node: Node, settings_class: type[SettingsT], **context: Any) -> SettingsT:
    """Declare ``settings_class.PARAMETERS`` on ``node``; return its validated settings.

    ``context`` goes to ``settings_class.from_values`` (e.g. the node's
    namespace). A value of the wrong type (e.g. an integer list for a float
    list) or any invalid value is a NodeStartupError naming the parameters.
    """
    values = {entry.name: _declare(node, entry) for entry in settings_class.PARAMETERS}
    try:
        return settings_class.from_values(values, **context)
    except InvalidParameters as error:
        raise NodeStartupError(str(error)) from error


def _declare(node: Node, entry: Parameter) -> Any:
    descriptor = ParameterDescriptor(description=entry.description, read_only=entry.read_only)
    try:
        if not entry.declared_by_type:
            return node.declare_parameter(entry.name, entry.default, descriptor).value
        value = node.declare_parameter(entry.name, RosParameter.Type[entry.type.ros_type], descriptor).value
        return entry.default if value is None else value
    except InvalidParameterTypeException as error:
        raise NodeStartupError(
            f"parameter '{entry.name}' has the wrong type ({error}); "
            f"expected {entry.type.label} ({entry.type.ros_type})"
        ) from error


class NodeStartupError(RuntimeError):
    """The node cannot start; the message says why, for the operator."""


class NodeDone(Exception):
    """The node finished its whole job during start-up (e.g. a check-only run): exit 0."""


def events_executor() -> Executor:
    """rclpy's C++ events executor, for a node whose callbacks fire at sensor rates.

    SingleThreadedExecutor rebuilds its wait set in Python from every entity
    of the node at each wake-up: measured on chunk_executor_node (two 480x640
    cameras, joint states at 30 Hz, ~100 wake-ups a second), its spinning
    thread took 10 % of a core, the events executor's 4 % (docs/benchmarks.md,
    executor_jitter).
    """
    return EventsExecutor()


def run_node(make_node: Callable[[], Node], args: list[str] | None = None,
             make_executor: Callable[[], Executor] = SingleThreadedExecutor) -> int:
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
    executor = make_executor()
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
