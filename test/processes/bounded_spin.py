"""The main loop every helper process shares: spin for a bounded time, then exit cleanly.

A helper process must never outlive its test, even when the test process is
killed before it can stop it; SIGINT/SIGTERM end it early.
"""

from __future__ import annotations

import sys
import time

import rclpy
from rclpy.executors import ExternalShutdownException


def spin_then_exit(node, run_s: float, on_exit=lambda: None) -> None:
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
