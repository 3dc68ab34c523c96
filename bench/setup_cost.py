"""What the set-up costs on a fresh machine: time and disk.

Clones the committed HEAD into a temporary folder and runs, with an empty pip
cache (so every package is downloaded, as on a new machine):
  1. scripts/setup_env.sh            (dev/server environment)
  2. scripts/setup_env.sh again      (the idempotent no-op)
  3. scripts/setup_env.sh --robot    (robot-side environment, no torch)
  4. scripts/build_interfaces.sh     (interface generation alone, fresh build dir)
and reports wall times and venv sizes.

usage: python -m bench.setup_cost      (~10 minutes, needs the network)
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench import outside_load
from bench.report import table_row, write_section

REPO = Path(__file__).resolve().parents[1]


def clean_env(**extra: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("_ROS_WHEELS_BOOTSTRAP_COMPLETE", "LD_LIBRARY_PATH", "VIRTUAL_ENV")
    }
    env.update(extra)
    return env


def timed(command: list[str], cwd: Path, env: dict) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} failed:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
        )
    return time.perf_counter() - started


def size_gb(path: Path) -> float:
    output = subprocess.run(
        ["du", "-sb", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return int(output.split()[0]) / 1e9


def main() -> None:
    outside_load.watch()
    with tempfile.TemporaryDirectory(prefix="lerobot_ros_setup_cost_") as tmp:
        tmp = Path(tmp)
        clone = tmp / "clone"
        subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
        env = clean_env(PIP_CACHE_DIR=str(tmp / "pip-cache"))
        fresh = timed(["scripts/setup_env.sh"], clone, env)
        again = timed(["scripts/setup_env.sh"], clone, env)
        robot_venv = tmp / "robot-venv"
        robot = timed(
            ["scripts/setup_env.sh", "--robot"],
            clone,
            {**env, "LEROBOT_ROS_VENV": str(robot_venv)},
        )
        shutil.rmtree(clone / "build", ignore_errors=True)
        interfaces = timed(
            ["scripts/build_interfaces.sh", str(clone / ".venv"), str(tmp / "ifaces")], clone, env
        )
        dev_size, robot_size = size_gb(clone / ".venv"), size_gb(robot_venv)

    robot_row = table_row(
        "`scripts/setup_env.sh --robot` into a second fresh venv (no torch, no LeRobot)",
        f"{robot:.0f} s",
        f"{robot_size:.2f} GB",
    )
    interfaces_row = table_row(
        "`scripts/build_interfaces.sh` alone (9 interfaces, C and C++ typesupports, 2 cores)",
        f"{interfaces:.0f} s",
        "",
    )
    body = f"""
| step | wall time | venv size |
|---|---|---|
| `scripts/setup_env.sh` on a fresh clone, empty pip cache | {fresh:.0f} s | {dev_size:.1f} GB |
| the same command again (nothing changed) | {again:.2f} s | |
{robot_row}
{interfaces_row}

Most of the dev venv is torch with its CUDA libraries (PyPI has no CPU-only torch for
Python 3.12); the robot venv is the ROS 2 wheels, NumPy and OpenCV. The robot set-up includes
its own interface build (the last row), as does the dev set-up.
"""
    write_section("setup_cost", "python -m bench.setup_cost", body)


if __name__ == "__main__":
    main()
