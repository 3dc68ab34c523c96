"""The robot-side install: `pip install .` without the server extra (set up by
`scripts/setup_env.sh --robot`) gives a working executor with no torch and no
LeRobot anywhere in its environment."""

import json
import subprocess
from pathlib import Path

import pytest

from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from support import background
from support.background import clean_env

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_robot_install")


@pytest.fixture(scope="module")
def robot_venv() -> Path:
    """A venv made by ``setup_env.sh --robot`` (started in the background:
    support/background.py)."""
    return background.start("robot_venv").wait(timeout_s=1200)


def test_robot_environment_has_no_torch_and_no_lerobot(robot_venv):
    code = (
        "import importlib.util as u, json; print(json.dumps([n for n in ('torch', 'lerobot') "
        "if u.find_spec(n)]))"
    )
    result = subprocess.run(
        [str(robot_venv / "bin" / "python"), "-c", code],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=robot_venv,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_robot_environment_package_is_a_regular_install_not_the_checkout(robot_venv):
    code = "import lerobot_ros, lerobot_ros.msg; print(lerobot_ros.__file__)"
    result = subprocess.run(
        [str(robot_venv / "bin" / "python"), "-c", code],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=robot_venv,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().startswith(str(robot_venv)), result.stdout


def test_robot_console_script_handshakes_with_the_server(robot_venv, policy_server):
    result = subprocess.run(
        [
            str(robot_venv / "bin" / "chunk_executor_node"),
            "--ros-args",
            "-p",
            f"joint_names:={json.dumps(list(SO101_JOINT_NAMES))}",
            "-p",
            "handshake_only:=true",
        ],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["handshake"] == "accepted"
