"""The main loop every stand-in shares: spin for a bounded time, then exit cleanly.

Invariant: a stand-in never outlives the test or benchmark that started it,
even when that process is killed before it can stop it; SIGINT/SIGTERM end
it early, and either way its node is destroyed and rclpy shut down before
the process exits 0.
"""

from __future__ import annotations

import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException


def spin_then_exit(node, run_s: float, on_exit=lambda: None) -> None:
    """Spin ``node`` for at most ``run_s`` seconds, run ``on_exit``, and exit the process."""
    deadline = time.monotonic() + run_s
    try:
        while rclpy.ok() and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    finally:
        on_exit()
        node.destroy_node()
        rclpy.try_shutdown()
    sys.exit(0)
