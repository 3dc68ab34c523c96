"""The ROS-workspace front-end: colcon builds the package from this tree, and
the installed executables run as `ros2 run` would start them.

colcon, ament_cmake and rosidl come from the ROS 2 wheels in the venv here;
on a real Jazzy/Kilted install the same CMakeLists.txt is used unchanged.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from support import background

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_colcon_workspace")


@pytest.fixture(scope="module")
def colcon_install() -> Path:
    """The install tree of a colcon workspace holding this package (built in the background:
    support/background.py)."""
    return background.start("colcon_install").wait(timeout_s=900)


def sourced_env(install: Path) -> dict:
    """The environment `source install/local_setup.bash` gives."""
    dump = subprocess.run(
        ["bash", "-c", f"source {install}/local_setup.bash && env -0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return dict(item.split("=", 1) for item in dump.split("\0") if "=" in item)


def test_install_tree_has_nodes_launch_config_and_interfaces(colcon_install):
    prefix = colcon_install / "lerobot_ros"
    for executable in ("policy_server_node", "chunk_executor_node"):
        assert os.access(prefix / "lib" / "lerobot_ros" / executable, os.X_OK)
    share = prefix / "share" / "lerobot_ros"
    for name in (
        "package.xml",
        "launch/server.launch.py",
        "launch/robot.launch.py",
        "config/server.yaml",
        "config/robot.yaml",
        "msg/Observation.msg",
        "srv/OpenSession.srv",
    ):
        assert (share / name).is_file(), name
    assert (
        prefix / "share" / "ament_index" / "resource_index" / "packages" / "lerobot_ros"
    ).is_file()
    package = next(prefix.glob("lib/python3*/site-packages/lerobot_ros"))
    # The package's own __init__ wins over the empty one rosidl generates.
    assert "extend_path" in (package / "__init__.py").read_text()
    assert (package / "msg" / "_observation.py").is_file()


def test_installed_executor_handshakes_with_the_server(colcon_install, policy_server):
    env = sourced_env(colcon_install)
    executable = colcon_install / "lerobot_ros" / "lib" / "lerobot_ros" / "chunk_executor_node"
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import lerobot_ros.msg as m, lerobot_ros as p; print(p.__file__); print(m.__file__)",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=colcon_install,
    )
    assert all(line.startswith(str(colcon_install)) for line in probe.stdout.split()), (
        probe.stdout + probe.stderr
    )
    # Started directly, as `ros2 run` does: its shebang finds the venv's python.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    result = subprocess.run(
        [
            str(executable),
            "--ros-args",
            "-p",
            f"joint_names:={json.dumps(list(SO101_JOINT_NAMES))}",
            "-p",
            "handshake_only:=true",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=colcon_install,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1])["handshake"] == "accepted"
