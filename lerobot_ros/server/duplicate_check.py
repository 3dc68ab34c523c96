"""Whether another live policy server already serves a namespace: heard by its heartbeat, before
this one advertises.

Live means its heartbeat is heard: a server killed with -9 leaves its
entities in the graph for a while, and its restart must not be refused. A
probe node with its own executor listens: configure may run inside the
server node's executor (the lifecycle service), which cannot spin again.
"""

from __future__ import annotations

import time

from rclpy.executors import SingleThreadedExecutor
from rclpy.node import Node

from lerobot_ros.msg import ServerStatus
from lerobot_ros.protocol.qos import STATUS_QOS

#: How long a starting server listens for another live server's heartbeat on its namespace (at
#: least).
DUPLICATE_LISTEN_MIN_S = 1.5
#: How long after joining the graph a starting server looks for another one's heartbeat publisher
#: (seconds): discovery on a loaded machine takes a while, and checking at once let a second
#: server start unnoticed in CI.
DUPLICATE_DISCOVERY_S = 2.0


def live_server_heard(
    node: Node, status_topic: str, joined_graph_at: float, heartbeat_period_s: float
) -> ServerStatus | None:
    """The heartbeat of another server on ``status_topic`` (resolved), or None when none is live
    there."""
    heard: list[ServerStatus] = []
    probe = Node(
        f"{node.get_name()}_duplicate_check",
        namespace=node.get_namespace(),
        context=node.context,
        start_parameter_services=False,
        enable_rosout=False,
    )
    executor = SingleThreadedExecutor(context=node.context)
    executor.add_node(probe)
    probe.create_subscription(ServerStatus, status_topic, heard.append, STATUS_QOS)
    try:
        # A new participant learns the graph over a moment: wait for a publisher that far.
        discovered_by = joined_graph_at + DUPLICATE_DISCOVERY_S
        while probe.count_publishers(status_topic) == 0:
            if time.monotonic() >= discovered_by:
                return None
            executor.spin_once(timeout_sec=0.1)
        deadline = time.monotonic() + max(DUPLICATE_LISTEN_MIN_S, 3 * heartbeat_period_s)
        while not heard and time.monotonic() < deadline:
            executor.spin_once(timeout_sec=0.1)
    finally:
        executor.shutdown(timeout_sec=1.0)
        probe.destroy_node()
    return heard[0] if heard else None
