"""The "Command-line tools" recipes of docs/command_line.md, run as written against one `ros2 launch` demo.

That page is the specification: its ``ros2 launch`` line starts the demo
(with this suite's checkpoint and the CPU appended, the only change), and
every ``$ ros2 ...`` line of its console block runs as written; each output
line the page shows must be a line of the real output (``...`` stands for
lines left out). The demo reaching STREAMING, `ros2 run`, and the demo's
clean stop on SIGINT are checked here too, so one demo serves them all.
"""

from __future__ import annotations

import re
import shlex

import pytest
from support.paths import REPO
from support.ros2_cli import Ros2Process, echo_once, requires_ros2_tools, ros2, stop_daemon

pytestmark = requires_ros2_tools

# The recipes are the "Command-line tools" section of docs/command_line.md (up to the next section or the end).
SECTION = re.search(r"^## Command-line tools\n(.*?)(?=^## |\Z)", (REPO / "docs" / "command_line.md").read_text(),
                    re.M | re.S).group(1)
BLOCKS = re.findall(r"^```(\w*)\n(.*?)^```", SECTION, re.M | re.S)
LAUNCH = next(line for _, block in BLOCKS for line in block.splitlines() if line.startswith("ros2 launch "))
RUN = next(line for _, block in BLOCKS for line in block.splitlines() if line.startswith("ros2 run "))


def console_recipes() -> list[tuple[str, list[str]]]:
    """(command, the output lines the page shows) for every ``$ ros2 ...`` line."""
    recipes: list[tuple[str, list[str]]] = []
    for language, block in BLOCKS:
        if language != "console":
            continue
        for line in block.splitlines():
            if line.startswith("$ "):
                recipes.append((line[2:], []))
            elif recipes:
                recipes[-1][1].append(line)
    return recipes


RECIPES = console_recipes()


@pytest.fixture(scope="module")
def demo(act_checkpoint, tmp_path_factory):
    """The page's demo launch, once for the module; stopped by the last test (or here if it failed first)."""
    launched = Ros2Process(tmp_path_factory.mktemp("demo_launch") / "launch.log",
                           *shlex.split(LAUNCH)[1:], f"checkpoint:={act_checkpoint}", "device:=cpu")
    # Torch import, load and warm-up take most of the start-up: every test may rely on a ready server.
    echo_once("/lerobot/status", "lerobot_ros/msg/ServerStatus", "m.ready", timeout_s=240)
    yield launched
    if launched.process.poll() is None or launched.group_alive():
        launched.stop()
    stop_daemon()


def test_the_readme_has_the_recipes():
    commands = [command.split()[:3] for command, _ in RECIPES]
    for verb in (["ros2", "topic", "echo"], ["ros2", "node", "list"], ["ros2", "param", "get"], ["ros2", "param", "set"],
                 ["ros2", "service", "call"], ["ros2", "interface", "show"]):
        assert verb in commands, f"recipe for {' '.join(verb)} missing in docs/command_line.md"
    assert LAUNCH.startswith("ros2 launch lerobot_ros demo.launch.py") and RUN.startswith("ros2 run lerobot_ros ")


def test_the_demo_streams_commands_to_the_simulated_arm(demo):
    # First: this wait covers the demo's start-up (torch import, load, warm-up). DEAD ends it at once.
    status = echo_once("/sim_arm/chunk_executor/status", "lerobot_ros/msg/ExecutorStatus",
                       "m.state_name == 'DEAD' or (m.state_name == 'STREAMING' and m.commands_published > 0)",
                       timeout_s=240)
    assert status["state_name"] == "STREAMING", f"{status['state_name']}: {status['reason']}\n{demo.log_text()[-3000:]}"
    assert status["client_id"] == "sim_arm" and status["server_namespace"] == "/lerobot"
    command = echo_once("/sim_arm/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray")
    assert len(command["data"]) == 6


@pytest.mark.parametrize("command, shown", RECIPES, ids=[command for command, _ in RECIPES])
def test_readme_recipe_runs_as_written(demo, command, shown):
    result = ros2(*shlex.split(command)[1:], timeout_s=60)
    # What a terminal shows: ros2 prints some answers (a refused parameter) on stderr.
    printed = result.stdout + result.stderr
    real = [line.rstrip() for line in printed.splitlines()]
    for line in shown:
        if line.strip() != "...":
            assert line.rstrip() in real, (
                f"docs/command_line.md shows {line!r} for `{command}`; the real output was:\n{printed}")


def test_ros2_run_starts_a_node(tmp_path):
    launched = Ros2Process(tmp_path / "run.log", *shlex.split(RUN)[1:])
    try:
        namespace = re.search(r"__ns:=(\S+)", RUN).group(1)
        state = echo_once(f"{namespace}/joint_states", "sensor_msgs/msg/JointState", timeout_s=120)
        assert state["name"] == ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper"]
    finally:
        code = launched.stop()
    assert code == 0, launched.log_text()[-3000:]


def test_the_demo_stops_cleanly_on_sigint(demo):
    # As a terminal's Ctrl-C: every process of the group gets SIGINT, and ros2 launch forwards its own.
    code = demo.stop()
    log = demo.log_text()
    assert code == 0, log[-4000:]
    assert "escalating to 'SIGTERM'" not in log and "process has died" not in log, log[-4000:]
    assert log.count("process has finished cleanly") == 3, log[-4000:]
