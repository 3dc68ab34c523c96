"""chunk_executor_node as a real process between a real policy server and a
stand-in robot driver (test/processes/robot_io.py: shuffled joint states, a
camera, and a recorder of every command it receives).

Each test has its own node names and topic prefix so tests never hear each
other; tests that do not kill the server share the suite's /lerobot server.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, spin_until
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from lerobot_ros.msg import ExecutorStatus
from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.qos import STATUS_QOS
from lerobot_ros.sim.default_policy import FRONT_CAMERA, SO101_JOINT_NAMES

sys.path.insert(0, str(REPO / "test" / "processes"))
from robot_io import POSITIONS  # noqa: E402

EXECUTOR = "lerobot_ros.executor.node"


class Robot:
    """robot_io.py running under ``prefix``; commands recorded as JSON lines."""

    def __init__(self, directory: Path, prefix: str, transport: str = "compressed", commands=()) -> None:
        self.prefix, self.out = prefix, directory / f"{prefix.strip('/')}_commands.jsonl"
        args = [sys.executable, str(REPO / "test" / "processes" / "robot_io.py"), "--prefix", prefix,
                "--out", str(self.out), "--transport", transport, "--run-s", "240"]
        for mode, topic in commands:
            args += ["--command", f"{mode}:{topic}"]
        self.out.touch()
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def commands(self, topic: str | None = None) -> list[dict]:
        lines = [json.loads(line) for line in self.out.read_text().splitlines() if line.strip()]
        return [line for line in lines if topic is None or line["topic"] == topic]

    def executor_parameters(self, server_namespace: str = "/lerobot", **overrides) -> dict:
        return {
            "server_namespace": server_namespace,
            "client_id": self.prefix.strip("/"),
            "joint_names": list(SO101_JOINT_NAMES),
            "camera_names": [FRONT_CAMERA],
            "camera_topics": [f"{self.prefix}/camera"],
            "camera_transports": ["compressed"],
            "state_topic": f"{self.prefix}/joint_states",
            "output_topic": f"{self.prefix}/commands",
            "handshake_timeout_s": 10.0,
            "status_period_s": 0.1,
            **overrides,
        }

    def stop(self) -> None:
        stop(self.process, timeout_s=5)


class Executor:
    """One chunk_executor_node process and its ~/status stream, read in the test process."""

    def __init__(self, ros_node, directory: Path, name: str, parameters: dict) -> None:
        self.node, self.name = ros_node, name
        self.log = directory / f"{name}.log"
        with self.log.open("w") as log:
            self.process = spawn_node(EXECUTOR, parameters, log=log, node_name=name)
        self.statuses: list[ExecutorStatus] = []
        self.subscription = ros_node.create_subscription(ExecutorStatus, f"/{name}/status", self._on_status, STATUS_QOS)

    def _on_status(self, msg: ExecutorStatus) -> None:
        self.statuses.append((time.monotonic(), msg))

    @property
    def status(self) -> ExecutorStatus | None:
        return self.statuses[-1][1] if self.statuses else None

    def wait(self, predicate, timeout_s: float, what: str) -> ExecutorStatus:
        ok = spin_until(self.node, lambda: self.status is not None and predicate(self.status), timeout_s)
        assert ok, f"{self.name}: {what} not reached within {timeout_s} s; last status {self._describe()}\n{self.log_text()}"
        return self.status

    def spin(self, seconds: float) -> None:
        spin_until(self.node, lambda: False, seconds)

    def states_since(self, since: float) -> set[str]:
        return {msg.state_name for at, msg in self.statuses if at >= since}

    def _describe(self) -> str:
        status = self.status
        if status is None:
            return "(none)"
        return f"{status.state_name} ({status.reason}) merged={status.chunks_merged} epoch={status.epoch}"

    def log_text(self) -> str:
        return self.log.read_text()[-3000:]

    def stop(self) -> int:
        self.node.destroy_subscription(self.subscription)
        return stop(self.process, timeout_s=10)


def trigger(ros_node, service: str):
    from std_srvs.srv import Trigger

    client = ros_node.create_client(Trigger, service)
    try:
        assert client.wait_for_service(timeout_sec=10), f"{service} not available"
        future = client.call_async(Trigger.Request())
        assert spin_until(ros_node, future.done, 10), f"{service} did not answer"
        return future.result()
    finally:
        ros_node.destroy_client(client)


@pytest.fixture
def launched(tmp_path, ros_node):
    """Start robots and executors; everything started is stopped at the end."""
    started: list = []

    def robot(prefix, **kwargs) -> Robot:
        started.append(Robot(tmp_path, prefix, **kwargs))
        return started[-1]

    def executor(name, parameters) -> Executor:
        started.append(Executor(ros_node, tmp_path, name, parameters))
        return started[-1]

    robot.executor = executor
    yield robot
    for thing in reversed(started):
        if isinstance(thing, Executor) and thing.process.poll() is None:
            thing.stop()
        elif isinstance(thing, Robot):
            thing.stop()


def is_hold(values) -> bool:
    return values == pytest.approx(list(POSITIONS), abs=1e-6)


# ---------------------------------------------------------------------------


def test_streams_commands_at_fps_without_starving(policy_server, launched):
    robot = launched("/stream_arm", commands=[("forward_command", "/stream_arm/commands")])
    executor = launched.executor("exec_stream", robot.executor_parameters())
    first = executor.wait(lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 30, "two chunks merged")
    started = time.monotonic()
    executor.spin(4.0)
    last = executor.status
    elapsed = time.monotonic() - started
    assert last.state_name == "STREAMING", last.reason
    assert last.starvation_ticks == first.starvation_ticks, "empty-queue ticks in steady state"
    published = last.commands_published - first.commands_published
    assert abs(published - 30 * elapsed) <= 0.1 * 30 * elapsed, (published, elapsed)
    assert last.chunks_merged > first.chunks_merged and last.request_timeouts == 0 and last.chunks_dropped == 0
    assert (last.client_id, last.server_namespace, last.fallback) == ("stream_arm", "/lerobot", "hold")
    assert 0 < last.latency_ms_p50 <= last.latency_ms_p95 <= last.latency_ms_max
    assert last.queue_depth > 0 and last.requests_sent >= last.chunks_merged
    received = robot.commands("/stream_arm/commands")
    steady = [c for c in received if c["t"] >= started]
    assert len(steady) >= 0.9 * 30 * elapsed
    assert all(len(c["values"]) == 6 for c in received)
    assert not all(is_hold(c["values"]) for c in steady), "policy actions, not the fallback, in steady state"
    entries = []
    diagnostics = executor.node.create_subscription(
        DiagnosticArray, "/diagnostics",
        lambda msg: entries.extend(e for e in msg.status if e.name == "exec_stream: chunk executor"), 10)
    try:
        assert spin_until(executor.node, lambda: entries, 5), "no /diagnostics entry from the executor"
    finally:
        executor.node.destroy_subscription(diagnostics)
    assert entries[-1].level == DiagnosticStatus.OK and entries[-1].message == "STREAMING"
    assert entries[-1].hardware_id == "stream_arm"
    assert {value.key for value in entries[-1].values} >= {"commands_published", "queue_depth", "latency_ms_p95"}
    session = last.session_id
    assert executor.stop() == 0, executor.log_text()
    assert spin_until(executor.node, lambda: f"session {session} of stream_arm closed: closed by the client"
                      in policy_server.log_text(), 5), "SIGINT must close the session"


def test_each_output_mode_reaches_a_subscriber_with_names_and_shapes(policy_server, launched):
    topics = {mode: f"/modes_arm/{mode}" for mode in ("forward_command", "joint_trajectory", "joint_state")}
    robot = launched("/modes_arm", transport="raw", commands=list(topics.items()))
    executors = [
        launched.executor(f"exec_{mode}", robot.executor_parameters(
            client_id=f"modes_{mode}", output_mode=mode, output_topic=topic, camera_transports=["raw"],
            jpeg_quality=0 if mode == "joint_state" else 80, fps=50.0 if mode == "joint_trajectory" else 30.0))
        for mode, topic in topics.items()
    ]
    for executor in executors:
        executor.wait(lambda s: s.chunks_merged >= 1, 40, "a merged chunk")
    assert spin_until(executors[0].node, lambda: all(len(robot.commands(t)) >= 20 for t in topics.values()), 10)
    forward = robot.commands(topics["forward_command"])[-1]
    assert len(forward["values"]) == 6
    trajectory = robot.commands(topics["joint_trajectory"])[-1]
    assert trajectory["names"] == list(SO101_JOINT_NAMES)
    assert len(trajectory["values"]) == 1 and len(trajectory["values"][0]) == 6
    assert trajectory["time_from_start"] == [pytest.approx(0.02)]
    state = robot.commands(topics["joint_state"])[-1]
    assert state["names"] == list(SO101_JOINT_NAMES) and len(state["values"]) == 6
    for executor in executors:
        assert executor.status.chunks_dropped == 0 and executor.status.state_name in ("STREAMING", "DEGRADED")


def test_first_handshake_refused_stops_before_any_command(policy_server, launched):
    robot = launched("/refused_arm", commands=[("forward_command", "/refused_arm/commands")])
    swapped = [SO101_JOINT_NAMES[1], SO101_JOINT_NAMES[0], *SO101_JOINT_NAMES[2:]]
    process = spawn_node(EXECUTOR, robot.executor_parameters(joint_names=swapped), node_name="exec_refused")
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stdout + stderr
    result = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    assert result["handshake"] == "refused"
    assert str(list(SO101_JOINT_NAMES)) in result["reason"] and str(swapped) in result["reason"]
    assert "error: handshake refused" in stderr and "Traceback" not in stderr
    time.sleep(0.5)
    assert robot.commands() == [], "nothing may be commanded after a refused first handshake"


def test_pause_resume_and_reset_episode(policy_server, launched, ros_node):
    robot = launched("/operator_arm", commands=[("forward_command", "/operator_arm/commands")])
    executor = launched.executor("exec_operator", robot.executor_parameters(max_offline_s=2.0))
    executor.wait(lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 1, 30, "streaming")

    paused = trigger(ros_node, "/exec_operator/pause")
    assert paused.success
    paused_at = time.monotonic()
    executor.wait(lambda s: s.paused, 5, "paused")
    requests = executor.status.requests_sent
    executor.spin(2.5)  # longer than max_offline_s: pause must not spend it
    during = [c for c in robot.commands() if paused_at + 0.2 < c["t"] < time.monotonic()]
    assert during and all(is_hold(c["values"]) for c in during), "pause holds the measured position"
    assert executor.status.requests_sent == requests, "no requests while paused"
    assert trigger(ros_node, "/exec_operator/resume").success
    status = executor.wait(lambda s: not s.paused and s.chunks_merged >= 2, 15, "streaming after resume")
    assert status.state_name != "DEAD"
    assert "DEAD" not in executor.states_since(paused_at)

    reset = trigger(ros_node, "/exec_operator/reset_episode")
    assert reset.success, reset.message
    assert "episode 1" in reset.message
    executor.wait(lambda s: s.episode == 1 and s.state_name == "STREAMING", 15, "streaming in episode 1")

    def audited_episodes():
        lines = [json.loads(line) for line in policy_server.audit.read_text().splitlines() if '"operator_arm"' in line]
        return {line["episode"] for line in lines if line["outcome"] == "ok"}

    assert spin_until(ros_node, lambda: 1 in audited_episodes(), 10), "the server served episode 1"
