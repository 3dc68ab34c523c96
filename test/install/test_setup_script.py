"""The set-up script's interpreter check: a clear refusal, nothing created."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO


def find_python311() -> str | None:
    for candidate in (
        "python3.11",
        *sorted(Path.home().glob(".pyenv/versions/3.11.*/bin/python")),
    ):
        path = shutil.which(str(candidate))
        if path:
            return path
    return None


def run_setup(env_overrides: dict, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LEROBOT_ROS_VENV": str(tmp_path / "venv"), **env_overrides}
    return subprocess.run(
        [str(REPO / "scripts" / "setup_env.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_python_311_is_refused_with_a_readable_message(tmp_path):
    python311 = find_python311()
    if python311 is None:
        pytest.skip("no Python 3.11 interpreter on this machine")
    result = run_setup({"LEROBOT_ROS_PYTHON": python311}, tmp_path)
    assert result.returncode == 1
    assert "needs a Python 3.12 interpreter" in result.stderr
    assert f"LEROBOT_ROS_PYTHON={python311} is Python 3.11." in result.stderr
    assert "LeRobot 0.6.1 requires Python >= 3.12" in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "venv").exists(), "nothing may be created before the check passes"


def test_an_interpreter_that_does_not_run_is_refused(tmp_path):
    result = run_setup({"LEROBOT_ROS_PYTHON": str(tmp_path / "no_such_python")}, tmp_path)
    assert result.returncode == 1
    assert "could not run it" in result.stderr


def test_unknown_argument_is_refused(tmp_path):
    result = subprocess.run(
        [str(REPO / "scripts" / "setup_env.sh"), "--gpu"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "unknown argument '--gpu'" in result.stderr


def test_rerun_with_unchanged_inputs_does_nothing():
    venv = Path(os.environ.get("LEROBOT_ROS_VENV") or REPO / ".venv")
    if Path(sys.prefix).resolve() != venv.resolve():
        pytest.skip(f"the suite runs in {sys.prefix}, not in the script's venv {venv}")
    result = subprocess.run(
        [str(REPO / "scripts" / "setup_env.sh")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "is up to date" in result.stdout


def test_the_interpreter_path_that_reaches_the_set_up_does_not_change_its_hash(tmp_path):
    # Issue 33: with the venv's bin/ on PATH (as the README has users do for `ros2`), python3.12 is
    # the venv's own; its path changed the hash and every run reinstalled (35-40 s, into the live
    # venv).
    base = subprocess.run(
        [sys.executable, "-c", "import sys; print(sys._base_executable)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    venv_bin = Path(sys.executable).parent
    hashes = {}
    for label, overrides in {
        "base interpreter named": {"LEROBOT_ROS_PYTHON": base},
        "this venv's interpreter named": {"LEROBOT_ROS_PYTHON": sys.executable},
        "searched, the venv's bin first on PATH": {"PATH": f"{venv_bin}:{os.environ['PATH']}"},
    }.items():
        env = {key: value for key, value in os.environ.items() if key != "LEROBOT_ROS_PYTHON"}
        result = run_setup({**env, **overrides, "LEROBOT_ROS_PRINT_INPUTS_HASH": "1"}, tmp_path)
        assert result.returncode == 0, result.stderr
        hashes[label] = result.stdout.strip().splitlines()[-1]
    assert len(set(hashes.values())) == 1, hashes
    assert not (tmp_path / "venv").exists(), "printing the hash creates nothing"
