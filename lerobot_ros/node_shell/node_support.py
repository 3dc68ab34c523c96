"""What every lerobot_ros node shares: declaring its parameter table, and the main loop.

Invariant: a node reads its parameters only through ``declare_settings`` (or
``DeclaredParameters``), which declares every entry of its table (description,
whether it may change while running) and hands back validated settings, or
stops the start-up with one message naming every problem; a later
``ros2 param set`` is accepted only for a runtime entry with a valid value.
The table itself is plain Python (lerobot_ros.node_shell.parameters).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

import rclpy
from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.exceptions import InvalidParameterTypeException
from rclpy.executors import Executor, ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import TransitionCallbackReturn
from rclpy.node import Node
from rclpy.parameter import Parameter as RosParameter
from rclpy.signals import SignalHandlerOptions

from lerobot_ros.node_shell.parameters import (
    STARTUP_ONLY,
    InvalidParameters,
    Parameter,
    Settings,
    runtime_change,
)

SettingsT = TypeVar("SettingsT", bound=Settings)


def declare_settings(node: Node, settings_class: type[SettingsT], **context: Any) -> SettingsT:
    """Declare ``settings_class.PARAMETERS`` on ``node``; return its validated settings.

    ``context`` goes to ``settings_class.from_values`` (e.g. the node's
    namespace). A value of the wrong type (e.g. an integer list for a float
    list) or any invalid value is a NodeStartupError naming the parameters.
    """
    return DeclaredParameters(node, settings_class).settings(**context)


def read_settings(node: Node, **context: Any):
    """The validated settings of the parameters ``declare_settings`` declared, as they are now
    (a managed node re-reads them on every configure); NodeStartupError names every problem."""
    return parameter_table(node).settings(**context)


def parameter_table(node: Node) -> DeclaredParameters:
    """The table ``declare_settings`` (or ``DeclaredParameters``) declared on ``node``."""
    return _TABLES[node]


_TABLES: weakref.WeakKeyDictionary[Node, DeclaredParameters] = weakref.WeakKeyDictionary()


class DeclaredParameters:
    """A settings table declared on a node, and the node's one on-set-parameters callback.

    Every entry is declared writable, so that a ``ros2 param set`` reaches
    ``parameters.runtime_change`` and is answered with its reason: a
    start-up-only entry "takes effect only at start-up" (unless
    ``configuring()``: an unconfigured lifecycle node reads them at its next
    configure), a runtime entry with an invalid value is refused with the
    same checks as at start-up, a valid one is handed to ``apply`` (on the
    thread that serves the parameter service) and becomes the current settings.
    """

    def __init__(self, node: Node, settings_class: type[SettingsT]) -> None:
        self._node, self._class = node, settings_class
        self._values = {entry.name: _declare(node, entry) for entry in settings_class.PARAMETERS}
        self.current: SettingsT | None = None
        self._apply: Callable[[Any], None] | None = None
        self._configuring: Callable[[], bool] = lambda: False
        _TABLES[node] = self
        node.add_on_set_parameters_callback(self._on_set)

    def settings(self, **context: Any) -> SettingsT:
        """The validated settings from the parameters' values now; NodeStartupError names every
        problem."""
        try:
            self.current = self._class.from_values(self._values, **context)
        except InvalidParameters as error:
            raise NodeStartupError(str(error)) from error
        return self.current

    def on_change(
        self, apply: Callable[[Any], None], configuring: Callable[[], bool] | None = None
    ) -> None:
        """Route accepted runtime changes to ``apply(new_settings)``; ``configuring``: start-up
        entries settable now."""
        self._apply = apply
        if configuring is not None:
            self._configuring = configuring

    def _on_set(self, parameters: list[RosParameter]) -> SetParametersResult:
        changes = {
            parameter.name: parameter.value
            for parameter in parameters
            if parameter.name in self._values
        }
        if not changes:
            return SetParametersResult(successful=True)
        configuring = self._configuring()
        if self.current is None:  # not read yet: checked all together when it is (configure)
            changed, refusal = (
                None,
                "" if configuring else f"{sorted(changes)}: the node is starting",
            )
        else:
            changed, refusal = runtime_change(self.current, changes, configuring)
        if refusal:
            self._node.get_logger().warning(f"parameter change refused: {refusal}")
            return SetParametersResult(successful=False, reason=refusal)
        self._values.update(changes)
        if changed is not None and not configuring:
            if self._apply is None:
                refusal = f"{sorted(changes)}: this node applies no parameter while running"
                return SetParametersResult(successful=False, reason=refusal)
            self._apply(changed)
            self._node.get_logger().info(f"parameters changed at runtime: {changes}")
        if changed is not None:
            self.current = changed
        return SetParametersResult(successful=True)


def _or_default(entry: Parameter, value: Any) -> Any:
    # A parameter declared by type alone has no value until one is given.
    return entry.default if entry.declared_by_type and value is None else value


def _declare(node: Node, entry: Parameter) -> Any:
    # Writable even when start-up-only: DeclaredParameters refuses those with the reason (rclpy's
    # read-only refusal would not say when the value takes effect).
    constraint = "settable while running" if entry.runtime else STARTUP_ONLY
    descriptor = ParameterDescriptor(
        description=entry.description, read_only=False, additional_constraints=constraint
    )
    try:
        if not entry.declared_by_type:
            return node.declare_parameter(entry.name, entry.default, descriptor).value
        value = node.declare_parameter(
            entry.name, RosParameter.Type[entry.type.ros_type], descriptor
        ).value
        return _or_default(entry, value)
    except InvalidParameterTypeException as error:
        raise NodeStartupError(
            f"parameter '{entry.name}' has the wrong type ({error}); "
            f"expected {entry.type.label} ({entry.type.ros_type})"
        ) from error


class TransitionFailed(Exception):
    """A step of a lifecycle transition could not be done; the message says why, for the operator.

    One exception for both lifecycle nodes (``server/lifecycle.py``,
    ``executor/lifecycle.py``): each turns it into a failed transition with
    its message as the reason.
    """


class NodeStartupError(RuntimeError):
    """The node cannot start; the message says why, for the operator."""


def run_autostart(node: Node) -> Node:
    """Configure, then activate, a lifecycle ``node`` whose ``autostart`` parameter is true; return
    it.

    With ``autostart`` false the node stays unconfigured for a lifecycle
    manager. A transition that fails is a NodeStartupError (exit 1 under
    ``run_node``) naming it and, when the node keeps it in
    ``transition_failure``, its reason. Run from ``run_node``'s ``make_node``,
    before spinning, so a signal during a long configure aborts it at once.
    """
    if not node.get_parameter("autostart").value:
        node.get_logger().info(
            "autostart is false: unconfigured, waiting for configure and activate "
            "(a lifecycle manager, or ros2 lifecycle set)"
        )
        return node
    for transition, trigger in (
        ("configure", node.trigger_configure),
        ("activate", node.trigger_activate),
    ):
        if trigger() != TransitionCallbackReturn.SUCCESS:
            reason = getattr(node, "transition_failure", "")
            raise NodeStartupError(
                f"autostart: {transition} failed: {reason or 'see the log above'}"
            )
    return node


class NodeDone(Exception):
    """The node finished its whole job during start-up (e.g. a check-only run): exit 0."""


_SHORTHAND = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:=")


def parameter_shorthand(argv: list[str]) -> list[str]:
    """``node name:=value ...`` as ``node --ros-args -p name:=value ...``, the way ``ros2 launch``
    reads arguments.

    ROS reads a bare ``name:=value`` before ``--ros-args`` as nothing (or a
    remap), so ``policy_server_node checkpoint:=/ckpt`` silently ignored the
    checkpoint. Everything from ``--ros-args`` on is left as written; a
    leading ``__node:=``-style special name is not a parameter and stays too.
    """
    if "--ros-args" in argv:
        head, tail = argv[: argv.index("--ros-args")], argv[argv.index("--ros-args") :]
    else:
        head, tail = list(argv), []
    program, rest = head[:1], head[1:]
    shorthand = [arg for arg in rest if _SHORTHAND.match(arg) and not arg.startswith("__")]
    if not shorthand:
        return list(argv)
    kept = [arg for arg in rest if arg not in shorthand]
    parameters = [item for arg in shorthand for item in ("-p", arg)]
    return [
        *program,
        *kept,
        "--ros-args",
        *parameters,
        *([arg for arg in tail[1:]] if tail else []),
    ]


def run_node(
    make_node: Callable[[], Node],
    args: list[str] | None = None,
    make_executor: Callable[[], Executor] = SingleThreadedExecutor,
) -> int:
    """Init rclpy, build the node, spin until SIGINT/SIGTERM; return an exit code.

    A NodeStartupError is reported as one clear line and exit code 1; a
    NodeDone raised from start-up ends the run with exit code 0. A
    signal during start-up (seconds of model loading) aborts it at once; a
    signal while serving calls the node's ``on_stop_requested()`` at once (it
    must only set flags), ends the spin loop and then calls its
    ``drain(spin_once)``, if it has one, while the context is still alive, so
    a node can finish in-flight work and publish its last messages.
    ``make_executor``: what spins the node (a managed node whose transitions
    wait for service answers needs a multi-threaded one).

    A signal during start-up can leave another thread inside native code
    (the server's loader, mid-forward in its warm-up); the process then
    leaves with ``os._exit`` after its own teardown. Left to the
    interpreter's finalization, that thread is killed (pthread_exit) the
    next time it takes the GIL, and the forced unwind through torch's
    noexcept pybind11 frames ends in std::terminate: exit -6, "terminate
    called without an active exception".
    """
    rclpy.init(
        args=parameter_shorthand(args if args is not None else sys.argv),
        signal_handler_options=SignalHandlerOptions.NO,
    )
    stop_requested = threading.Event()
    serving = False
    interrupted_start_up = False

    def on_signal(signum, frame) -> None:
        if not serving:
            raise KeyboardInterrupt
        stop_requested.set()
        # Runs before the executor dispatches whatever woke it, so a node can
        # refuse new work at once (e.g. a session request that raced the signal).
        notify = getattr(node, "on_stop_requested", None)
        if notify is not None:
            notify()

    previous = {
        signum: signal.signal(signum, on_signal) for signum in (signal.SIGINT, signal.SIGTERM)
    }
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
        interrupted_start_up = not serving
    finally:
        # A Ctrl-C in a terminal reaches every process of the group, and
        # `ros2 launch` forwards its own SIGINT too: a second signal during
        # this bounded teardown must not interrupt it half-way.
        for signum in previous:
            signal.signal(signum, lambda signum, frame: None)
        executor.shutdown(timeout_sec=1.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if interrupted_start_up and threading.active_count() > 1:
        # Thread.is_alive() is no test here: the interrupted join of the
        # loader can leave it reporting a running thread as stopped.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0
