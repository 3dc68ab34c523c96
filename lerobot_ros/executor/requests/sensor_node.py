"""The executor's sensor subscriptions, on a hidden companion node that nothing spins: read when
needed.

Why nothing spins them: a request needs the newest joint state and frames
a few times a second, while cameras and joint-state drivers publish much
faster. Taking every message costs the process for data that a newer one
replaces unread: a camera frame is copied out of the middleware into Python
while holding the GIL the control loop needs, and any rclpy executor adds
its own cost per wake-up (docs/reference/benchmarks.md has the measured cost of each
way of reading them). Here they cost nothing until read: the subscriptions
keep the newest sample (keep-last 1, qos.SENSOR_QOS) in the middleware, and
``newest`` takes it when the observation assembler asks
(observation_assembly.py), with the time the middleware received it, so a
frame taken late is exactly as old as it is.

Why a companion node: rclpy executors wait on every subscription of the
nodes they spin; on the executor node itself these would wake its
MultiThreadedExecutor at sensor rates (ready, and never taken). The
companion is named ``_<node>_sensors`` (hidden from ``ros2 node list``;
``ros2 node list -a`` shows it) in the executor's namespace, and ignores the
process's global arguments: a ``__node:=`` remap would otherwise give it the
executor's own name. Topics are resolved by the executor node, so its remaps
apply to the sensor topics exactly as if it subscribed itself. The
subscriptions are best effort and volatile, which every publisher's QoS
matches, so no QoS event of theirs needs serving.
"""

from __future__ import annotations

import time

from rclpy.exceptions import InvalidHandle
from rclpy.node import Node

from lerobot_ros.protocol.clocks import received_monotonic_s


def _never_called(_message) -> None:
    """The callback of a subscription nothing spins."""


class SensorNode:
    """Subscriptions of ``parent``'s sensors whose newest sample is taken on demand, until
    ``destroy()``."""

    def __init__(self, parent: Node) -> None:
        self._parent = parent
        self.node = Node(
            f"_{parent.get_name()}_sensors",
            namespace=parent.get_namespace(),
            context=parent.context,
            use_global_arguments=False,
            start_parameter_services=False,
            enable_rosout=False,
        )

    def subscribe(self, message_type, topic: str, qos):
        """A subscription to ``topic`` as ``parent`` resolves it (its namespace and remaps), and
        its reader.

        The reader returns the newest message that arrived since it was last
        called, with its receive time on the monotonic clock, or None; it
        raises when the middleware's bytes do not deserialize.
        """
        subscription = self.node.create_subscription(
            message_type, self._parent.resolve_topic_name(topic), _never_called, qos
        )

        def newest():
            taken = None
            try:
                with subscription.handle:
                    while (
                        sample := subscription.handle.take_message(subscription.msg_type, False)
                    ) is not None:
                        taken = sample  # keep-last 1 holds one; a deeper history gives its newest
            except InvalidHandle:
                return None  # destroyed under a reader: the node is shutting down
            if taken is None:
                return None
            message, info = taken
            return message, received_monotonic_s(info, time.time_ns(), time.monotonic())

        return newest

    def destroy(self) -> None:
        """Destroy the node and its subscriptions; idempotent."""
        if self.node is not None:
            self.node.destroy_node()
            self.node = None


def read_latched(sensors: SensorNode, message_type, topic: str, qos, timeout_s: float):
    """The message a latched (transient local) ``topic`` holds, waited for up to ``timeout_s``;
    None if none came."""
    newest = sensors.subscribe(message_type, topic, qos)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        taken = newest()
        if taken is not None:
            return taken[0]
        time.sleep(0.05)
    return None
