"""docs/tutorials/my_robot.md run as written: a checkpoint without lerobot_ros.json on a robot with
its own joint names (issue 33).

The page is the specification. Its parameter files (the ``# my_server.yaml``
and ``# my_robot.yaml`` blocks) and every shell block marked "run by" this
test are taken from it and run in the page's order, each with bash in a
working directory holding the two files: ``ros2 launch`` blocks in the
background (stopped at the end with SIGINT, a terminal's Ctrl-C), every other
block to completion, bounded. Only what a test must is changed: the
checkpoint path (a copy of the suite's ACT checkpoint without its
lerobot_ros.json; the sidecar block writes into a second copy), and the names
``my_arm`` and ``/lerobot``, which become names of this run's own (the server
launch gets the matching ``namespace:=``), so it never meets another robot or
server. The hardware boundary is the stand-in driver (robot_io: JointState
under the robot's joint names, in a shuffled order, and a recorder of every
command it receives) and a camera publisher on the robot's camera topic.

Checked: the page's shown output of the checkpoint inspection, the sidecar
naming the same actions as the server parameter, the server serving the
parameter's names, the accepted handshake, streaming, the goal completing,
the clean stops, and the commands at the driver: in the robot's joint order
and units (the hold is the measured position in radians), within the limits
and the step bound, and, while the policy ran, the server's actions (in
policy units, read off the session's action_chunk topic) converted by
``(policy - joint_offset) / joint_scale``. Section 2's "which wins" is checked
on the sidecar its block writes, through the server's loader: the
``action_names`` and ``trained_fps`` parameters replace the file's.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from lerobot_ros.processes import stop
from support.doc_commands import FENCE, block_run_by
from support.paths import REPO
from support.ros import spin_until
from support.ros2_cli import ROS2, echoed_messages, process_group_alive, requires_ros2_tools

PAGE = REPO / "docs" / "tutorials" / "my_robot.md"
#: The page's placeholder for the user's checkpoint directory.
CHECKPOINT = "/path/to/pretrained_model"
#: Bound of one foreground block; the server's readiness wait includes its load and warm-up on a
#: loaded CPU.
BLOCK_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 180.0
#: The stand-in camera: larger than the policy's 96x128, as a real camera is (the executor shrinks
#: it).
CAMERA_SIZE = (240, 320)


@dataclass(frozen=True)
class Fenced:
    line: int  # 1-based line of the opening fence
    language: str
    body: str


def fenced_blocks(text: str) -> list[Fenced]:
    """Every fenced block of ``text``, in order (the parameter files and shown output; commands:
    ``block_run_by``)."""
    lines, found, index = text.splitlines(), [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = next(j for j in range(index + 1, len(lines)) if lines[j].startswith("```"))
        found.append(Fenced(index + 1, opening.group(1), "\n".join(lines[index + 1 : end]) + "\n"))
        index = end + 1
    return found


FENCED = fenced_blocks(PAGE.read_text())
#: The page's shell blocks this test runs, in page order, read the one way every doc-command test
#: reads them.
RUN_BLOCKS = [block for block in block_run_by(PAGE, __file__) if block.language != "inline"]


def parameter_file(name: str) -> str:
    """The page's YAML block whose first line is ``# <name>...``."""
    found = [
        block.body
        for block in FENCED
        if block.language == "yaml" and block.body.startswith(f"# {name}")
    ]
    assert len(found) == 1, (
        f"docs/tutorials/my_robot.md needs one yaml block starting '# {name}', found {len(found)}"
    )
    return found[0]


def ros_parameters(text: str) -> dict:
    return yaml.safe_load(text)["/**"]["ros__parameters"]


def shown_output(line: int) -> list[str]:
    """The lines of the untagged block right after the fenced block opening at ``line`` (the output
    it shows)."""
    index = next(i for i, block in enumerate(FENCED) if block.line == line)
    after = FENCED[index + 1] if index + 1 < len(FENCED) else None
    return after.body.splitlines() if after is not None and after.language == "" else []


def test_the_page_holds_the_walkthrough_and_its_files():
    run = "".join(block.body for block in RUN_BLOCKS)
    for step in (
        "config.json",
        "lerobot_ros.json",
        "server.launch.py",
        "m.ready",
        "handshake_only:=true",
        "robot.launch.py",
        "run_policy",
        "max_step_per_tick",
        "stop_policy",
    ):
        assert step in run, f"the walkthrough's run blocks lost their {step} step"
    server, robot = (
        ros_parameters(parameter_file("my_server.yaml")),
        ros_parameters(parameter_file("my_robot.yaml")),
    )
    # The page's point: the robot's names are not the policy's, and the mapping names the policy's
    # in its order.
    assert robot["policy_joint_names"] == server["action_names"]
    assert not set(robot["joint_names"]) & set(robot["policy_joint_names"])


@dataclass(frozen=True)
class Names:
    robot: str  # replaces my_arm
    server: str  # the server launch's namespace: /lerobot becomes /<server>/lerobot


def localized(text: str, names: Names) -> str:
    text = re.sub(r"\bmy_arm\b", names.robot, text)
    return re.sub(r"(?<![\w/])/lerobot(?!\w)", f"/{names.server}/lerobot", text)


def command_of(block, names: Names, bare: Path, with_sidecar: Path) -> str:
    """The block as this test runs it: the names localized, the checkpoint path substituted."""
    text = localized(block.body, names)
    text = text.replace(CHECKPOINT, str(with_sidecar if "lerobot_ros.json" in text else bare))
    if "server.launch.py" in text:
        text = text.rstrip("\n") + f" namespace:={names.server}\n"
    return text


def copy_without_sidecar(checkpoint: Path, directory: Path) -> Path:
    """A checkpoint directory as a LeRobot training run leaves it: no lerobot_ros.json (files
    linked, not copied)."""
    directory.mkdir()
    for path in checkpoint.iterdir():
        if path.name != "lerobot_ros.json":
            (directory / path.name).symlink_to(path.resolve(), target_is_directory=path.is_dir())
    return directory


def environment() -> dict:
    # The venv's ros2 (and its python3) first on PATH, as the page assumes; the run's domain
    # (conftest.py).
    return {
        **os.environ,
        "PATH": f"{Path(ROS2).parent}:{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
    }


class Shell:
    """One block run by bash in its own process group, its output in a file."""

    def __init__(self, command: str, cwd: Path, log: Path, background: bool) -> None:
        self.command, self.log = command, log
        script = f"exec {command}" if background else command
        with log.open("w") as out:
            self.process = subprocess.Popen(
                ["bash", "-euo", "pipefail", "-c", script],
                cwd=cwd,
                env=environment(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def group_alive(self) -> bool:
        return process_group_alive(self.process.pid)

    def kill(self) -> None:
        if self.group_alive():
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def interrupt(self, timeout_s: float = 30.0) -> int | None:
        """Ctrl-C: SIGINT to the whole group; the exit code, or None (then killed) when it outlived
        ``timeout_s``."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        try:
            code = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            code = None
        if self.group_alive():
            self.kill()
            return None
        return code


@pytest.fixture
def walkthrough(act_checkpoint, tmp_path, ros_node):
    """The page run in order; yields what was seen. Everything started is stopped here, whatever
    failed."""
    from lerobot_ros.msg import ActionChunk
    from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS
    from lerobot_ros.protocol.wire.output_modes import OUTPUT_MODES

    tag = f"{os.getpid()}"
    names = Names(robot=f"my_arm_{tag}", server=f"walkthrough_{tag}")
    bare = copy_without_sidecar(act_checkpoint, tmp_path / "pretrained_model")
    with_sidecar = copy_without_sidecar(act_checkpoint, tmp_path / "pretrained_model_with_sidecar")
    work = tmp_path / "work"
    work.mkdir()
    for name in ("my_server.yaml", "my_robot.yaml"):
        (work / name).write_text(localized(parameter_file(name), names))
    robot = ros_parameters((work / "my_robot.yaml").read_text())

    # The robot is on: its driver under the robot's own names, its camera on the robot's own topic.
    driver_out = tmp_path / "driver_commands.jsonl"
    prefix = robot["state_topic"].rsplit("/", 1)[0]
    assert robot["state_topic"] == f"{prefix}/joint_states", (
        "the stand-in driver publishes <prefix>/joint_states"
    )
    assert robot["output_mode"] in OUTPUT_MODES
    chunks: list = []
    launches: list[Shell] = []
    ran: list[tuple] = []  # (block, command as run, its output, monotonic time it started)
    stopped: list[tuple[str, int | None, str]] = []
    stand_ins = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lerobot_ros.standins.robot_io",
                "--prefix",
                prefix,
                "--out",
                str(driver_out),
                "--command",
                f"{robot['output_mode']}:{robot['output_topic']}",
                "--run-s",
                "240",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lerobot_ros.standins.camera_publisher",
                "--topic",
                robot["camera_topics"][0],
                "--transport",
                robot["camera_transports"][0],
                "--height",
                str(CAMERA_SIZE[0]),
                "--width",
                str(CAMERA_SIZE[1]),
                "--run-s",
                "240",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        ),
    ]
    # The server's actions, in policy units, as the session's action_chunk topic carries them to
    # the executor.
    subscription = ros_node.create_subscription(
        ActionChunk,
        f"{robot['server_namespace']}/clients/{robot['client_id']}/action_chunk",
        lambda msg: chunks.append(msg) if msg.status == ActionChunk.STATUS_OK else None,
        ACTION_CHUNK_QOS,
    )
    try:
        for index, block in enumerate(RUN_BLOCKS):
            command = command_of(block, names, bare, with_sidecar)
            log = tmp_path / f"block_{index}.log"
            if command.lstrip().startswith("ros2 launch "):
                launches.append(Shell(command.strip(), work, log, background=True))
                continue
            started = time.monotonic()
            shell = Shell(command, work, log, background=False)
            timeout_s = READY_TIMEOUT_S if "m.ready" in command else BLOCK_TIMEOUT_S

            def died():
                return next(
                    (launch for launch in launches if launch.process.poll() is not None), None
                )

            finished = spin_until(
                ros_node,
                lambda shell=shell, died=died: (
                    shell.process.poll() is not None or died() is not None
                ),
                timeout_s,
            )
            if shell.process.poll() is None:
                shell.kill()
                gone = died()
                pytest.fail(
                    f"`{command.strip()}` did not finish within {timeout_s:g} s"
                    + (
                        f"; `{gone.command}` exited "
                        f"{gone.process.returncode}:\n{gone.output()[-4000:]}"
                        if gone
                        else f" (finished={finished}):\n{shell.output()[-3000:]}"
                    )
                )
            assert shell.process.returncode == 0, (
                f"`{command.strip()}` exited {shell.process.returncode}:\n{shell.output()[-4000:]}"
            )
            ran.append((block, command, shell.output(), started))
        # Ctrl-C in terminal 2 (the robot), then in terminal 1 (the server): the page's order.
        for launch in reversed(launches):
            stopped.append((launch.command, launch.interrupt(), launch.output()))
    finally:
        ros_node.destroy_subscription(subscription)
        for launch in reversed(launches):
            if launch.group_alive():
                launch.kill()
        for process in stand_ins:
            stop(process, timeout_s=5)
    yield {
        "ran": ran,
        "stopped": stopped,
        "robot": robot,
        "chunks": chunks,
        "work": work,
        "with_sidecar": with_sidecar,
        "commands": [
            json.loads(line) for line in driver_out.read_text().splitlines() if line.strip()
        ],
    }


def output_of(seen: dict, text: str) -> str:
    """The output of the one block run whose command holds ``text``."""
    return run_of(seen, text)[2]


def run_of(seen: dict, text: str) -> tuple:
    """(block, command as run, output, start time) of the one block run whose command holds
    ``text``."""
    found = [run for run in seen["ran"] if text in run[1]]
    assert len(found) == 1, f"{len(found)} blocks run hold {text!r}"
    return found[0]


def messages(output: str) -> list[dict]:
    """The messages ``ros2 topic echo`` printed, parsed."""
    return echoed_messages(output)


@requires_ros2_tools
def test_the_walkthrough_serves_a_checkpoint_without_sidecar_to_a_robot_with_its_own_names(
    walkthrough,
):
    from lerobot_ros.standins.robot_io import POSITIONS

    seen, robot = walkthrough, walkthrough["robot"]
    server = ros_parameters((seen["work"] / "my_server.yaml").read_text())

    # 1. The inspection prints what the page shows.
    block, _, output, _ = run_of(seen, "config.json")
    shown = shown_output(block.line)
    assert shown, "the page shows the inspection's output in an untagged block right after it"
    for line in shown:
        assert line in output.splitlines(), (
            f"docs/tutorials/my_robot.md shows {line!r}; the real output:\n{output}"
        )

    # 2. The sidecar the page writes names the actions the server parameter names.
    sidecar = json.loads((seen["with_sidecar"] / "lerobot_ros.json").read_text())
    assert (
        sidecar["action_names"] == server["action_names"]
        and sidecar["fps"] == server["trained_fps"]
    )

    # The server read its names from the parameter (its checkpoint has no sidecar) and serves the
    # page's camera.
    status = messages(output_of(seen, "m.ready"))[0]
    assert status["ready"] and status["capabilities"]["action_names"] == server["action_names"]
    assert status["capabilities"]["camera_names"] == robot["camera_names"]

    # The robot's own names and topics are what the driver publishes.
    state = messages(output_of(seen, "/joint_states"))[0]
    assert (
        sorted(state["name"]) == sorted(robot["joint_names"])
        and state["name"] != robot["joint_names"]
    )
    assert '"handshake": "accepted"' in output_of(seen, "handshake_only:=true")

    # 7. Streaming and holding until a goal; the hold is the measured position, by name, in
    # radians.
    echoed = messages(output_of(seen, "/chunk_executor/status"))
    executor_status = next(m for m in echoed if "state_name" in m)
    assert executor_status["state_name"] == "STREAMING" and executor_status["paused"] is True
    assert executor_status["client_id"] == robot["client_id"]
    held = next(m for m in echoed if "data" in m)["data"]
    assert held == pytest.approx(list(POSITIONS), abs=1e-9)
    goal = output_of(seen, "run_policy")
    assert "termination: completed" in goal and "Goal finished with status: SUCCEEDED" in goal, (
        goal
    )
    assert "no goal was running" in output_of(seen, "stop_policy")

    # Both launches stop cleanly on Ctrl-C, robot first.
    for command, code, log in seen["stopped"]:
        assert code == 0 and log.count("process has finished cleanly") == 1, (
            f"`{command}` exited {code}:\n{log[-4000:]}"
        )
        assert "escalating to 'SIGTERM'" not in log, log[-4000:]

    # The commands at the driver: robot order and units, the envelope, and the policy's actions
    # through the mapping.
    from lerobot_ros.sim.so101 import SO101_JOINT_NAMES

    assert robot["joint_names"] == list(SO101_JOINT_NAMES), (
        "robot_io's POSITIONS are given in this order"
    )
    values = np.array([command["values"] for command in seen["commands"]], dtype=np.float64)
    lower, upper = np.array(robot["joint_lower_limits"]), np.array(robot["joint_upper_limits"])
    assert (
        values.ndim == 2 and values.shape[1] == len(robot["joint_names"]) and len(values) > 100
    ), values.shape
    assert values[0] == pytest.approx(list(POSITIONS), abs=1e-9)
    assert (values >= lower - 1e-9).all() and (values <= upper + 1e-9).all()
    # The step bound: the file's until the page's `ros2 param set` raised it (robot_io stamps on
    # the same clock).
    _, set_command, set_output, set_at = run_of(seen, "max_step_per_tick")
    assert "Set parameter successful" in set_output, set_output
    raised = float(set_command.split()[-1])
    steps = np.abs(np.diff(values, axis=0)).max(axis=1)
    before = np.array([command["t"] for command in seen["commands"][1:]]) < set_at
    assert before.sum() > 100 and steps[before].max() <= robot["max_step_per_tick"] + 1e-9
    assert steps.max() <= max(raised, robot["max_step_per_tick"]) + 1e-9

    assert seen["chunks"], "no action chunk was seen on the session's topic"
    policy_rows = np.concatenate(
        [
            np.asarray(chunk.actions_robot, dtype=np.float64).reshape(
                chunk.chunk_length, chunk.action_dim
            )
            for chunk in seen["chunks"]
        ]
    )
    scale, offset = np.array(robot["joint_scale"]), np.array(robot["joint_offset"])
    expected = np.clip((policy_rows - offset) / scale, lower, upper)
    nearest = np.array([np.abs(expected - value).max(axis=1).argmin() for value in values])
    matched = np.abs(expected[nearest] - values).max(axis=1) < 1e-5
    assert matched.sum() >= 30, (
        f"{matched.sum()} of {len(values)} commands are a server action through the mapping"
    )
    # The mapping changed the units: read as policy units, those commands would be far from any
    # action.
    assert (np.abs(policy_rows[nearest[matched]] - values[matched]).max(axis=1) > 0.1).all()


def test_the_server_parameters_win_over_the_sidecar_the_page_writes(act_checkpoint, tmp_path):
    # Section 2's "which wins", on the sidecar its block writes: the parameter's names and fps
    # replace the file's.
    from lerobot_ros.server.policy.checkpoint import load_policy

    checkpoint = copy_without_sidecar(act_checkpoint, tmp_path / "pretrained_model")
    block = next(block for block in RUN_BLOCKS if "lerobot_ros.json" in block.body)
    shell = Shell(
        block.body.replace(CHECKPOINT, str(checkpoint)),
        tmp_path,
        tmp_path / "sidecar.log",
        background=False,
    )
    assert shell.process.wait(timeout=BLOCK_TIMEOUT_S) == 0, shell.output()
    sidecar = json.loads((checkpoint / "lerobot_ros.json").read_text())
    from_file = load_policy(str(checkpoint), device="cpu").capabilities
    assert (
        from_file.action_names == tuple(sidecar["action_names"])
        and from_file.trained_fps == sidecar["fps"]
    )
    assert from_file.state_names == tuple(sidecar["state_names"])
    names = [f"joint_{index}" for index in range(len(sidecar["action_names"]))]
    given = load_policy(
        str(checkpoint), device="cpu", action_names=names, trained_fps=15.0
    ).capabilities
    assert given.action_names == tuple(names) and given.trained_fps == 15.0
    assert given.state_names == tuple(sidecar["state_names"]), "state_names exist only in the file"
