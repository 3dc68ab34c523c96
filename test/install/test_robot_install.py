"""The robot-side install: `pip install .` without the server extra (set up by
`scripts/setup_env.sh --robot`) gives a working executor with no torch and no
LeRobot anywhere in its environment."""

import json
import os
import subprocess
from pathlib import Path

import pytest
from support.paths import REPO

from lerobot_ros.sim.so101 import SO101_JOINT_NAMES


def clean_env(**extra) -> dict:
    # The wheels' bootstrapper marks this process as set up and points
    # LD_LIBRARY_PATH at this venv; another venv must start from scratch.
    env = {k: v for k, v in os.environ.items() if k not in ("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def robot_venv(tmp_path_factory) -> Path:
    venv = tmp_path_factory.mktemp("robot") / "venv"
    result = subprocess.run(
        [str(REPO / "scripts" / "setup_env.sh"), "--robot"],
        env=clean_env(LEROBOT_ROS_VENV=str(venv)), capture_output=True, text=True, timeout=1200,
    )
    assert result.returncode == 0, f"robot set-up failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return venv


def test_robot_environment_has_no_torch_and_no_lerobot(robot_venv):
    code = "import importlib.util as u, json; print(json.dumps([n for n in ('torch', 'lerobot') if u.find_spec(n)]))"
    result = subprocess.run([str(robot_venv / "bin" / "python"), "-c", code], env=clean_env(),
                            capture_output=True, text=True, timeout=60, cwd=robot_venv)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_robot_environment_package_is_a_regular_install_not_the_checkout(robot_venv):
    code = "import lerobot_ros, lerobot_ros.msg; print(lerobot_ros.__file__)"
    result = subprocess.run([str(robot_venv / "bin" / "python"), "-c", code], env=clean_env(),
                            capture_output=True, text=True, timeout=60, cwd=robot_venv)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(robot_venv)), result.stdout


def test_robot_console_script_handshakes_with_the_server(robot_venv, policy_server):
    result = subprocess.run(
        [str(robot_venv / "bin" / "chunk_executor_node"), "--ros-args",
         "-p", f"joint_names:={json.dumps(list(SO101_JOINT_NAMES))}", "-p", "handshake_only:=true"],
        env=clean_env(), capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["handshake"] == "accepted"
