"""chunk_executor_node as a real process between a real policy server and a
stand-in robot driver (lerobot_ros/standins/robot_io.py: shuffled joint states, a
camera, and a recorder of every command it receives).

Each test has its own node names and topic prefix so tests never hear each
other; tests that do not kill the server share the suite's /lerobot server.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus

from lerobot_ros.processes import spawn_node
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from support.executor_processes import EXECUTOR, is_hold, trigger
from support.jsonl import read_jsonl
from support.ros import spin_until


@pytest.mark.serial
def test_streams_commands_at_fps_without_starving(policy_server, launched):
    robot = launched("/stream_arm", commands=[("forward_command", "/stream_arm/commands")])
    executor = launched.executor("exec_stream", robot.executor_parameters())
    first = executor.wait(
        lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 30, "two chunks merged"
    )
    started = time.monotonic()
    executor.spin(4.0)
    last = executor.status
    elapsed = time.monotonic() - started
    assert last.state_name == "STREAMING", last.reason
    assert last.starvation_ticks == first.starvation_ticks, "empty-queue ticks in steady state"
    published = last.commands_published - first.commands_published
    assert abs(published - 30 * elapsed) <= 0.1 * 30 * elapsed, (published, elapsed)
    assert (
        last.chunks_merged > first.chunks_merged
        and last.request_timeouts == 0
        and last.chunks_dropped == 0
    )
    assert (last.client_id, last.server_namespace, last.fallback) == (
        "stream_arm",
        "/lerobot",
        "hold",
    )
    assert 0 < last.latency_ms_p50 <= last.latency_ms_p95 <= last.latency_ms_max
    assert last.queue_depth > 0 and last.requests_sent >= last.chunks_merged
    received = robot.commands("/stream_arm/commands")
    steady = [c for c in received if c["t"] >= started]
    assert len(steady) >= 0.9 * 30 * elapsed
    assert all(len(c["values"]) == 6 for c in received)
    assert not all(is_hold(c["values"]) for c in steady), (
        "policy actions, not the fallback, in steady state"
    )
    entries = []
    diagnostics = executor.node.create_subscription(
        DiagnosticArray,
        "/diagnostics",
        lambda msg: entries.extend(
            e for e in msg.status if e.name == "exec_stream: chunk executor"
        ),
        10,
    )
    try:
        assert spin_until(executor.node, lambda: entries, 5), (
            "no /diagnostics entry from the executor"
        )
    finally:
        executor.node.destroy_subscription(diagnostics)
    assert entries[-1].level == DiagnosticStatus.OK and entries[-1].message == "STREAMING"
    assert entries[-1].hardware_id == "stream_arm"
    assert {value.key for value in entries[-1].values} >= {
        "commands_published",
        "queue_depth",
        "latency_ms_p95",
    }
    session = last.session_id
    assert executor.stop() == 0, executor.log_text()
    assert spin_until(
        executor.node,
        lambda: (
            f"session {session} of stream_arm closed: closed by the client"
            in policy_server.log_text()
        ),
        5,
    ), "SIGINT must close the session"


@pytest.mark.serial
def test_a_control_rate_above_fps_publishes_interpolated_commands_at_that_rate(
    policy_server, launched
):
    robot = launched("/rate_arm", commands=[("joint_state", "/rate_arm/commands")])
    executor = launched.executor(
        "exec_rate", robot.executor_parameters(output_mode="joint_state", control_rate_hz=200.0)
    )
    first = executor.wait(
        lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 30, "two chunks merged"
    )
    started = time.monotonic()
    executor.spin(3.0)
    last, elapsed = executor.status, time.monotonic() - started
    published = last.commands_published - first.commands_published
    assert abs(published - 200 * elapsed) <= 0.1 * 200 * elapsed, (published, elapsed)
    assert last.starvation_ticks == first.starvation_ticks and last.state_name == "STREAMING", (
        last.reason
    )
    assert last.request_threshold_s >= 0.5, "never below buffer_time_s"
    steady = [c for c in robot.commands("/rate_arm/commands") if c["t"] >= started]
    assert len(steady) >= 0.85 * 200 * elapsed
    assert all(c["names"] == list(SO101_JOINT_NAMES) for c in steady)
    # 30 Hz actions at 200 Hz: 6.7 ticks per action, on the straight line between two actions.
    # Three consecutive commands in one segment are evenly spaced and moving (a staircase
    # of repeated actions would be flat inside a segment and jump between them).
    values = np.array([c["values"] for c in steady])
    step = np.abs(np.diff(values, axis=0)).max(axis=1)
    curvature = np.abs(values[2:] - 2 * values[1:-1] + values[:-2]).max(axis=1)
    on_a_line = (curvature < 1e-9) & (step[1:] > 1e-7)
    assert on_a_line.mean() >= 0.5, (on_a_line.mean(), values[:10])


def test_each_output_mode_reaches_a_subscriber_with_names_and_shapes(policy_server, launched):
    topics = {
        mode: f"/modes_arm/{mode}"
        for mode in ("forward_command", "joint_trajectory", "joint_state")
    }
    robot = launched("/modes_arm", transport="raw", commands=list(topics.items()))
    executors = [
        launched.executor(
            f"exec_{mode}",
            robot.executor_parameters(
                client_id=f"modes_{mode}",
                output_mode=mode,
                output_topic=topic,
                camera_transports=["raw"],
                jpeg_quality=0 if mode == "joint_state" else 80,
                fps=50.0 if mode == "joint_trajectory" else 30.0,
            ),
        )
        for mode, topic in topics.items()
    ]
    for executor in executors:
        executor.wait(lambda s: s.chunks_merged >= 1, 40, "a merged chunk")
    assert spin_until(
        executors[0].node, lambda: all(len(robot.commands(t)) >= 20 for t in topics.values()), 10
    )
    forward = robot.commands(topics["forward_command"])[-1]
    assert len(forward["values"]) == 6
    trajectory = robot.commands(topics["joint_trajectory"])[-1]
    assert trajectory["names"] == list(SO101_JOINT_NAMES)
    assert len(trajectory["values"]) == 1 and len(trajectory["values"][0]) == 6
    assert trajectory["time_from_start"] == [pytest.approx(0.02)]
    state = robot.commands(topics["joint_state"])[-1]
    assert state["names"] == list(SO101_JOINT_NAMES) and len(state["values"]) == 6
    for executor in executors:
        assert executor.status.chunks_dropped == 0 and executor.status.state_name in (
            "STREAMING",
            "DEGRADED",
        )


def test_first_handshake_refused_stops_before_any_command(policy_server, launched):
    robot = launched("/refused_arm", commands=[("forward_command", "/refused_arm/commands")])
    swapped = [SO101_JOINT_NAMES[1], SO101_JOINT_NAMES[0], *SO101_JOINT_NAMES[2:]]
    process = spawn_node(
        EXECUTOR, robot.executor_parameters(joint_names=swapped), node_name="exec_refused"
    )
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 1, stdout + stderr
    result = json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])
    assert result["handshake"] == "refused"
    assert str(list(SO101_JOINT_NAMES)) in result["reason"] and str(swapped) in result["reason"]
    assert (
        "error: autostart: configure failed: handshake refused" in stderr
        and "Traceback" not in stderr
    )
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
    assert during and all(is_hold(c["values"]) for c in during), (
        "pause holds the measured position"
    )
    assert executor.status.requests_sent == requests, "no requests while paused"
    merged_before_resume = executor.status.chunks_merged
    assert trigger(ros_node, "/exec_operator/resume").success
    # A chunk merged after the resume: the pause plus the last chunk's playback can
    # outlast this server's 3 s idle timeout, and then that chunk comes from the
    # session the executor re-opened, which is the one the reset below must name.
    status = executor.wait(
        lambda s: not s.paused and s.chunks_merged > merged_before_resume,
        20,
        "a chunk merged after resume",
    )
    assert status.state_name != "DEAD"
    assert "DEAD" not in executor.states_since(paused_at)

    reset = trigger(ros_node, "/exec_operator/reset_episode")
    assert reset.success, reset.message
    assert "episode 1" in reset.message
    executor.wait(
        lambda s: s.episode == 1 and s.state_name == "STREAMING", 15, "streaming in episode 1"
    )

    def audited_episodes():
        lines = read_jsonl(policy_server.audit, '"operator_arm"')
        return {line["episode"] for line in lines if line["outcome"] == "ok"}

    assert spin_until(ros_node, lambda: 1 in audited_episodes(), 10), "the server served episode 1"
