"""Slow set-ups started when the suite begins, so they overlap the tests before the ones that need
them.

Building the colcon workspace (~90 s) and the robot-profile venv (~80 s)
are mostly a subprocess working alone; run inline they added their whole
length to the suite. ``start_wanted`` (conftest.py, after collection)
starts each one only if a collected test uses its fixture; the fixture
then waits for it, bounded, and fails with its log if it failed. A fixture
whose set-up was not started (e.g. run by another plugin's collection)
starts it itself, and so still works, only without the overlap.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from support.paths import REPO

#: The package sources colcon builds (what a ROS workspace's src/lerobot_ros holds).
COLCON_SOURCES = (
    "package.xml",
    "CMakeLists.txt",
    "setup.py",
    "README.md",
    "cmake",
    "msg",
    "srv",
    "action",
    "lerobot_ros",
    "bin",
    "launch",
    "config",
)


def clean_env(**extra) -> dict:
    """This environment without what ties it to the suite's venv (for another venv or
    workspace)."""
    # The wheels' bootstrapper marks this process as set up and points
    # LD_LIBRARY_PATH at this venv; another venv must start from scratch.
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH")
    }
    env.update(extra)
    return env


@dataclass
class SetUp:
    """One set-up subprocess, its output in a log file, and what it produces."""

    name: str
    directory: Path
    product: Path
    process: subprocess.Popen
    log: Path

    def wait(self, timeout_s: float) -> Path:
        """The product once the set-up succeeded; raises AssertionError (with its log)
        otherwise."""
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(
                f"{self.name} did not finish in {timeout_s:g} s:\n{self.log.read_text()[-3000:]}"
            ) from None
        assert code == 0, f"{self.name} failed ({code}):\n{self.log.read_text()[-3000:]}"
        return self.product

    def remove(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.directory, ignore_errors=True)


def _spawn(
    name: str, directory: Path, product: Path, args: list[str], cwd: Path, env: dict
) -> SetUp:
    log = directory / f"{name}.log"
    with log.open("w") as out:
        process = subprocess.Popen(args, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    return SetUp(name, directory, product, process, log)


def robot_venv_setup(directory: Path) -> SetUp:
    """``scripts/setup_env.sh --robot`` into a fresh venv: the robot-side install (no torch, no
    LeRobot)."""
    venv = directory / "venv"
    return _spawn(
        "robot set-up",
        directory,
        venv,
        [str(REPO / "scripts" / "setup_env.sh"), "--robot"],
        directory,
        clean_env(LEROBOT_ROS_VENV=str(venv)),
    )


def colcon_build(directory: Path) -> SetUp:
    """``colcon build`` of this tree in a fresh workspace, with the ROS 2 wheels of the suite's
    venv."""
    workspace = directory / "colcon_ws"
    package = workspace / "src" / "lerobot_ros"
    package.mkdir(parents=True)
    for name in COLCON_SOURCES:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, package / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, package / name)
    venv = Path(sys.prefix)
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "AMENT_PREFIX_PATH": str(venv),
        "CMAKE_PREFIX_PATH": str(venv),
    }
    if shutil.which("colcon", path=str(venv / "bin")) is None:
        args = [
            sys.executable,
            "-c",
            "raise SystemExit('colcon is missing from the venv: "
            "scripts/setup_env.sh installs it with the test extra')",
        ]
        return _spawn("colcon build", directory, workspace / "install", args, workspace, env)
    args = [
        str(venv / "bin" / "colcon"),
        "build",
        "--event-handlers",
        "console_direct-",
        "--cmake-args",
        "-DBUILD_TESTING=OFF",
        f"-DPython3_EXECUTABLE={sys.executable}",
    ]
    return _spawn("colcon build", directory, workspace / "install", args, workspace, env)


#: fixture name -> how its set-up starts
SET_UPS = {"robot_venv": robot_venv_setup, "colcon_install": colcon_build}
_started: dict[str, SetUp] = {}


def start(fixture: str) -> SetUp:
    """The fixture's set-up, started now unless it already was."""
    if fixture not in _started:
        directory = Path(tempfile.mkdtemp(prefix=f"lerobot_ros_{fixture}_"))
        _started[fixture] = SET_UPS[fixture](directory)
    return _started[fixture]


def start_wanted(fixtures_used: set[str]) -> None:
    """Start the set-ups whose fixtures a collected test uses."""
    for fixture in SET_UPS:
        if fixture in fixtures_used:
            start(fixture)


def remove_all() -> None:
    while _started:
        _started.popitem()[1].remove()
