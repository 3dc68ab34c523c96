"""The nodes' entry points read arguments as the docs write them: ``policy_server_node
checkpoint:=/ckpt``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from lerobot_ros.node_shell.node_support import parameter_shorthand
from support import domains


def test_name_value_arguments_before_ros_args_are_parameters():
    assert parameter_shorthand(["node", "checkpoint:=/ckpt", "device:=cpu"]) == [
        "node",
        "--ros-args",
        "-p",
        "checkpoint:=/ckpt",
        "-p",
        "device:=cpu",
    ]
    assert parameter_shorthand(["node", "checkpoint:=/c", "--ros-args", "-r", "__ns:=/gpu0"]) == [
        "node",
        "--ros-args",
        "-p",
        "checkpoint:=/c",
        "-r",
        "__ns:=/gpu0",
    ]
    written = ["node", "--ros-args", "-p", "checkpoint:=/c"]
    assert parameter_shorthand(written) == written, "the --ros-args form stays as written"
    assert parameter_shorthand(["node", "--flag"]) == ["node", "--flag"]


def test_policy_server_node_with_checkpoint_shorthand_reads_the_checkpoint(tmp_path):
    # Issue 33: ROS read `checkpoint:=...` before --ros-args as a remap; the server never saw the
    # checkpoint.
    missing = tmp_path / "no_such_checkpoint"
    executable = Path(sys.executable).parent / "policy_server_node"
    env = {**os.environ, "ROS_DOMAIN_ID": str(domains.domain("entry_points"))}
    result = subprocess.run(
        [str(executable), f"checkpoint:={missing}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 1, output[-2000:]
    assert f"checkpoint '{missing}' is not a directory" in output, output[-2000:]
