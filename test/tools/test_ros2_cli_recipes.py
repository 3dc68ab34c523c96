"""The "Command-line tools" recipes of docs/how-to/command_line.md, run as written against one
`ros2 launch` demo.

That page is the specification, read through support/doc_commands.py (the
blocks it marks ``run by`` this file): its ``ros2 launch`` line starts the demo
(with this suite's checkpoint and the CPU appended, the only change), and
every ``$ ros2 ...`` line of its console block runs as written; each output
line the page shows must be a line of the real output (``...`` stands for
lines left out). Its ``ros2 run`` block runs as written (the node, then the
echo of its joint states). The demo reaching STREAMING and its clean stop on
SIGINT are checked here too, so one demo serves them all.

The same demo runs the command spans of the paragraphs two node pages mark ``run by`` this file:
docs/reference/nodes/policy_server_node.md's typed ``ros2 param set /lerobot batch_window_ms 5.0``
and docs/reference/nodes/sim_robot_node.md's ``ros2 topic hz /tf`` (stopped with SIGINT once it
prints a rate, as a terminal's Ctrl-C) and latched ``robot_description`` echo.
"""

from __future__ import annotations

import re
import time

import pytest

from support.doc_commands import block_run_by, is_complete, words
from support.ros2_cli import Ros2Process, echo_once, requires_ros2_tools, ros2, stop_daemon

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = [requires_ros2_tools, pytest.mark.xdist_group("test_ros2_cli_recipes")]

# Every block of docs/how-to/command_line.md marked `run by` this file: the demo launch, the
# console recipes, `ros2 run`.
BLOCKS = block_run_by("docs/how-to/command_line.md", __file__)
LAUNCH = next(
    command for block in BLOCKS for command in block.commands if command.startswith("ros2 launch ")
)
RUN_BLOCK = next(
    block for block in BLOCKS if any(command.startswith("ros2 run ") for command in block.commands)
)
RUN, RUN_ECHO = RUN_BLOCK.commands
#: (command, the output lines the page shows) for every ``$ ros2 ...`` line.
RECIPES = [recipe for block in BLOCKS if block.language == "console" for recipe in block.console()]
#: The node pages' paragraphs marked `run by` this file: their complete command spans, run against
#: the demo.
NODE_PAGE_COMMANDS = [
    (page, span)
    for page in (
        "docs/reference/nodes/policy_server_node.md",
        "docs/reference/nodes/sim_robot_node.md",
    )
    for block in block_run_by(page, __file__)
    for span in block.commands
    if is_complete(span)
]


@pytest.fixture(scope="module")
def demo(act_checkpoint, tmp_path_factory):
    """The page's demo launch, once for the module; stopped by the last test (or here if it failed
    first)."""
    launched = Ros2Process(
        tmp_path_factory.mktemp("demo_launch") / "launch.log",
        *words(LAUNCH)[1:],
        f"checkpoint:={act_checkpoint}",
        "device:=cpu",
    )
    # Torch import, load and warm-up take most of the start-up: every test may rely on a ready
    # server.
    echo_once("/lerobot/status", "lerobot_ros/msg/ServerStatus", "m.ready", timeout_s=240)
    yield launched
    if launched.process.poll() is None or launched.group_alive():
        launched.stop()
    stop_daemon()


def test_the_readme_has_the_recipes():
    commands = [command.split()[:3] for command, _ in RECIPES]
    for verb in (
        ["ros2", "topic", "echo"],
        ["ros2", "node", "list"],
        ["ros2", "param", "get"],
        ["ros2", "param", "set"],
        ["ros2", "service", "call"],
        ["ros2", "interface", "show"],
    ):
        assert verb in commands, (
            f"recipe for {' '.join(verb)} missing in docs/how-to/command_line.md"
        )
    assert LAUNCH.startswith("ros2 launch lerobot_ros demo.launch.py") and RUN.startswith(
        "ros2 run lerobot_ros "
    )


def test_the_demo_streams_commands_to_the_simulated_arm(demo):
    # First: this wait covers the demo's start-up (torch import, load, warm-up). DEAD ends it at
    # once.
    status = echo_once(
        "/sim_arm/chunk_executor/status",
        "lerobot_ros/msg/ExecutorStatus",
        "m.state_name == 'DEAD' or (m.state_name == 'STREAMING' and m.commands_published > 0)",
        timeout_s=240,
    )
    assert status["state_name"] == "STREAMING", (
        f"{status['state_name']}: {status['reason']}\n{demo.log_text()[-3000:]}"
    )
    assert status["client_id"] == "sim_arm" and status["server_namespace"] == "/lerobot"
    command = echo_once(
        "/sim_arm/forward_position_controller/commands", "std_msgs/msg/Float64MultiArray"
    )
    assert len(command["data"]) == 6


@pytest.mark.parametrize("command, shown", RECIPES, ids=[command for command, _ in RECIPES])
def test_readme_recipe_runs_as_written(demo, command, shown):
    result = ros2(*words(command)[1:], timeout_s=60)
    # What a terminal shows: ros2 prints some answers (a refused parameter) on stderr.
    printed = result.stdout + result.stderr
    real = [line.rstrip() for line in printed.splitlines()]
    for line in shown:
        if line.strip() != "...":
            assert line.rstrip() in real, (
                f"docs/how-to/command_line.md shows {line!r} for `{command}`; the real output "
                f"was:\n{printed}"
            )


def test_ros2_run_starts_a_node(tmp_path):
    assert RUN.startswith("ros2 run ") and RUN_ECHO.startswith("ros2 topic echo --once ")
    launched = Ros2Process(tmp_path / "run.log", *words(RUN)[1:])
    try:
        namespace = re.search(r"__ns:=(\S+)", RUN).group(1)
        # the node is up
        echo_once(f"{namespace}/joint_states", "sensor_msgs/msg/JointState", timeout_s=120)
        printed = ros2(
            *words(RUN_ECHO)[1:], timeout_s=60
        ).stdout  # the page's own echo, as written
        for joint in (
            "shoulder_pan",
            "shoulder_lift",
            "elbow_flex",
            "wrist_flex",
            "wrist_roll",
            "gripper",
        ):
            assert f"- {joint}" in printed, printed
    finally:
        code = launched.stop()
    assert code == 0, launched.log_text()[-3000:]


def test_the_node_pages_commands_run_as_written(demo, tmp_path):
    assert sorted(span for _, span in NODE_PAGE_COMMANDS) == [
        "ros2 param set /lerobot batch_window_ms 5.0",
        "ros2 topic echo --once --full-length --qos-durability transient_local "
        "--qos-reliability reliable /sim_arm/robot_description",
        "ros2 topic hz /tf",
    ], NODE_PAGE_COMMANDS
    for page, command in NODE_PAGE_COMMANDS:
        # runs until interrupted: Ctrl-C once it has printed a rate
        if command.startswith("ros2 topic hz "):
            hz = Ros2Process(tmp_path / "hz.log", *words(command)[1:])
            deadline = time.monotonic() + 60
            while (
                "average rate" not in hz.log_text()
                and time.monotonic() < deadline
                and hz.process.poll() is None
            ):
                time.sleep(1)
            hz.stop()
            assert re.search(r"average rate: \d", hz.log_text()), (
                f"{page}: `{command}`\n{hz.log_text()[-2000:]}"
            )
            continue
        printed = ros2(*words(command)[1:], timeout_s=60).stdout
        if "param set" in command:
            assert "Set parameter successful" in printed, f"{page}: `{command}`\n{printed}"
        else:
            # The whole URDF (without --full-length ros2 cuts strings at 128 characters), to its
            # last tag.
            assert "<robot" in printed and "shoulder_pan" in printed and "</robot>" in printed, (
                f"{page}: `{command}`\n{printed[-2000:]}"
            )


def test_the_demo_stops_cleanly_on_sigint(demo):
    # As a terminal's Ctrl-C: every process of the group gets SIGINT, and ros2 launch forwards its
    # own.
    code = demo.stop()
    log = demo.log_text()
    assert code == 0, log[-4000:]
    assert "escalating to 'SIGTERM'" not in log and "process has died" not in log, log[-4000:]
    assert log.count("process has finished cleanly") == 3, log[-4000:]
