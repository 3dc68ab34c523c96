"""The executor's sensor subscriptions, on a hidden companion node spun by a thread of its own.

Why a second node: the executor node itself spins on a MultiThreadedExecutor
(a lifecycle transition and a RunPolicy goal's waiter block inside callbacks
while the server's answers must still be delivered), and that executor's
loop is expensive per wake-up: it rebuilds its wait set in Python, and a
message it handed to a pool thread stays ready until that thread takes it,
so the loop wakes again for nothing. Cameras and joint states wake an
executor at sensor rates. Measured (bench/executor_jitter.py's run, 30 Hz
policy, two 480x640 raw cameras, quiet machine): the whole executor took
33.5 % of a core with the sensors on the MultiThreadedExecutor (its loop
alone 20 %), 17.1 % with them here on a SingleThreadedExecutor (this
thread 7 %, the other loop 2.7 %). rclpy adds nodes, not callback groups, to
an executor, so the sensors live on a node of their own. (rclpy's events
executor would cost less again, but in rclpy 9.1.2 it delivered messages
erratically off the main thread: docs/benchmarks.md.)

The companion is named ``_<node>_sensors`` (hidden from ``ros2 node list``;
``ros2 node list -a`` shows it) in the executor's namespace, and ignores the
process's global arguments: a ``__node:=`` remap would otherwise give it the
executor's own name. Topics are resolved by the executor node, so its remaps
apply to the sensor topics exactly as if it subscribed itself. The core's
sensor holders have their own locks: these callbacks run beside the
executor node's.
"""

from __future__ import annotations

import threading

from rclpy.executors import ExternalShutdownException, ShutdownException, SingleThreadedExecutor
from rclpy.node import Node

#: Bound on stopping the spinning thread (seconds).
STOP_TIMEOUT_S = 2.0


class SensorNode:
    """Subscriptions of ``parent``'s sensors, spun on a thread of their own from ``start()`` to ``destroy()``."""

    def __init__(self, parent: Node) -> None:
        self._parent = parent
        self.node = Node(f"_{parent.get_name()}_sensors", namespace=parent.get_namespace(), context=parent.context,
                         use_global_arguments=False, start_parameter_services=False, enable_rosout=False)
        self._executor = SingleThreadedExecutor(context=parent.context)
        self._thread: threading.Thread | None = None

    def subscribe(self, message_type, topic: str, callback, qos, raw: bool = False):
        """A subscription to ``topic`` as ``parent`` resolves it (its namespace and remaps)."""
        return self.node.create_subscription(message_type, self._parent.resolve_topic_name(topic), callback, qos,
                                             raw=raw)

    def start(self) -> None:
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="lerobot_ros-sensors", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        try:
            self._executor.spin()
        except (ExternalShutdownException, ShutdownException):
            pass  # the context went down under the wait: the process is ending

    def destroy(self) -> None:
        """Stop spinning, then destroy the node and its subscriptions; idempotent."""
        if self._thread is not None:
            self._executor.shutdown(timeout_sec=STOP_TIMEOUT_S)
            self._thread.join(timeout=STOP_TIMEOUT_S)
            self._thread = None
        if self.node is not None:
            self.node.destroy_node()
            self.node = None
