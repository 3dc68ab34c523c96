"""Bounded waits on the ROS graph, and free ports, for tests in the test process."""

from __future__ import annotations

import socket
import time


def spin_until(node, predicate, timeout_s: float) -> bool:
    """Spin ``node`` until ``predicate()`` is true or ``timeout_s`` passes."""
    import rclpy

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        rclpy.spin_once(node, timeout_sec=0.05)
    return predicate()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
