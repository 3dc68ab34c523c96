"""Bounded waits and service calls on the ROS graph, and free ports, for tests in the test
process."""

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


def call_service(node, service_type, name: str, request, timeout_s: float):
    """One service call from ``node``, its client created and destroyed here; fails the test on a
    timeout."""
    client = node.create_client(service_type, name)
    try:
        assert client.wait_for_service(timeout_sec=timeout_s), f"{name} not available"
        future = client.call_async(request)
        assert spin_until(node, future.done, timeout_s), (
            f"{name} did not answer within {timeout_s} s"
        )
        return future.result()
    finally:
        node.destroy_client(client)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
