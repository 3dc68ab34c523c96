"""Shared fixtures: an isolated ROS graph per test run, checkpoints built once.

Every run gets its own ROS_DOMAIN_ID and localhost-only discovery so that
concurrent runs (and robots on the developer's network) never hear each
other, and the Hugging Face Hub is never contacted.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _isolate_ros_graph() -> None:
    # Domain ids 1-100 are safe on every platform; derive one from the pid so
    # parallel runs on one machine differ. Always override: the developer's
    # shell may point at a domain with real robots in it.
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("LEROBOT_ROS_TEST_DOMAIN_ID") or str(1 + os.getpid() % 100)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


_isolate_ros_graph()


@pytest.fixture(scope="session")
def act_checkpoint(tmp_path_factory) -> Path:
    """A real ACT checkpoint for the simulated 6-joint arm, random weights."""
    from lerobot_ros.sim.default_policy import build_act_checkpoint

    return build_act_checkpoint(tmp_path_factory.mktemp("act_so101"))


@pytest.fixture(scope="session")
def ros_node():
    """An rclpy node in the test process, for clients and subscribers."""
    import rclpy

    rclpy.init()
    node = rclpy.create_node(f"test_client_{os.getpid()}")
    yield node
    node.destroy_node()
    rclpy.try_shutdown()


def spin_until(node, predicate, timeout_s: float) -> bool:
    """Spin ``node`` until ``predicate()`` is true or ``timeout_s`` passes."""
    import rclpy

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        rclpy.spin_once(node, timeout_sec=0.05)
    return predicate()


@pytest.fixture(scope="session")
def policy_server(act_checkpoint, tmp_path_factory, ros_node):
    """A real policy_server_node process serving ``act_checkpoint`` at /lerobot.

    Shared by every test that only reads from it (get_status, heartbeat,
    handshakes). Yields the log path; the process is stopped with SIGINT and
    must exit cleanly.
    """
    from lerobot_ros.processes import spawn_node, stop
    from lerobot_ros.srv import GetStatus

    log_path = tmp_path_factory.mktemp("server") / "policy_server.log"
    with log_path.open("w") as log:
        process = spawn_node("lerobot_ros.server.node", {"checkpoint": str(act_checkpoint)}, log=log)
    client = ros_node.create_client(GetStatus, "/lerobot/get_status")
    deadline = time.monotonic() + 180
    while not client.wait_for_service(timeout_sec=0.5):
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            pytest.fail(f"policy_server_node did not come up (exit {process.returncode}):\n{log_path.read_text()[-4000:]}")
    ros_node.destroy_client(client)
    yield log_path
    exit_code = stop(process)
    assert exit_code == 0, f"policy_server_node exited with {exit_code}:\n{log_path.read_text()[-4000:]}"
