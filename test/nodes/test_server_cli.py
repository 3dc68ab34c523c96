"""The shared server driven with the real ``ros2`` command, as an operator would.

``ros2 lifecycle get/set`` takes it through deactivate and activate, and
``ros2 param set`` changes a runtime parameter (seen in ``get_status``) and
is refused for a start-up-only one. It leaves the server as it found it.
Skips, saying why, where the vendored ros2 tools are not installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from support.lifecycle import lifecycle_state, set_parameters
from support.robot_client import call

from lerobot_ros.srv import GetStatus

ROS2 = Path(sys.executable).with_name("ros2")
pytestmark = pytest.mark.skipif(
    not ROS2.is_file(), reason=f"no ros2 command at {ROS2}: the vendored ros2 tools are not installed in this venv")


def ros2(verb: str, command: str, *args: str) -> subprocess.CompletedProcess:
    """One ros2 command without the daemon (none lingers across test domains), given time to discover the node."""
    return subprocess.run([str(ROS2), verb, command, "--no-daemon", "--spin-time", "3", *args],
                          capture_output=True, text=True, timeout=90)


def max_batch_size(ros_node) -> int:
    client = ros_node.create_client(GetStatus, "/lerobot/get_status")
    try:
        return call(ros_node, client, GetStatus.Request()).status.max_batch_size
    finally:
        ros_node.destroy_client(client)


def test_ros2_lifecycle_and_param_against_the_server(policy_server, ros_node):
    got = ros2("lifecycle", "get", "/lerobot")
    assert got.stdout.strip() == "active [3]", got
    assert "Transitioning successful" in ros2("lifecycle", "set", "/lerobot", "deactivate").stdout
    assert lifecycle_state(ros_node, "/lerobot") == "inactive"
    assert "Transitioning successful" in ros2("lifecycle", "set", "/lerobot", "activate").stdout
    assert lifecycle_state(ros_node, "/lerobot") == "active"

    before = max_batch_size(ros_node)
    changed = ros2("param", "set", "/lerobot", "max_batch_size", str(before + 1))
    try:
        assert "Set parameter successful" in changed.stdout, changed
        assert max_batch_size(ros_node) == before + 1
    finally:  # restored in-process: one ros2 command costs seconds here
        assert set_parameters(ros_node, "/lerobot", max_batch_size=before)[0].successful
    refused = ros2("param", "set", "/lerobot", "device", "cuda")
    assert "Setting parameter failed: 'device' takes effect only at start-up" in refused.stdout + refused.stderr
