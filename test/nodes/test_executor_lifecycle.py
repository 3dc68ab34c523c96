"""chunk_executor_node as a managed node and a RunPolicy action server, as real processes.

Lifecycle transitions go through the node's real lifecycle services
(change_state / get_state), goals through a real rclpy action client; the
stand-in robot driver (lerobot_ros/standins/robot_io.py) records every command, so
"no command after deactivate but the hold" is checked on what the robot got.
A goal while the server is gone is checked in test/reliability/test_chaos.py,
whose hung-worker test kills its own server anyway.
"""

from __future__ import annotations

import time

import pytest
from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState
from rclpy.action import ActionClient

from lerobot_ros.action import RunPolicy
from lerobot_ros.srv import StartPolicy, StopPolicy
from support.executor_processes import is_hold
from support.goals import WAIT_S, GoalRun
from support.lifecycle import lifecycle_state as support_lifecycle_state
from support.ros import call_service, spin_until


def call(node, service_type, name: str, request, timeout_s: float = WAIT_S):
    return call_service(node, service_type, name, request, timeout_s)


def lifecycle_state(node, executor_name: str) -> str:
    # Asked again while unanswered: the first ask of a node that has just started can lose
    # its reply (a full run once saw get_state unanswered for 20 s right after the start).
    return support_lifecycle_state(node, f"/{executor_name}", timeout_s=WAIT_S)


def change_state(node, executor_name: str, transition: int) -> bool:
    return call(
        node,
        ChangeState,
        f"/{executor_name}/change_state",
        ChangeState.Request(transition=Transition(id=transition)),
    ).success


def test_every_lifecycle_transition_via_the_lifecycle_services(policy_server, launched, ros_node):
    robot = launched("/managed_arm", commands=[("forward_command", "/managed_arm/commands")])
    executor = launched.executor("exec_managed", robot.executor_parameters(autostart=False))
    name = "exec_managed"
    assert lifecycle_state(ros_node, name) == "unconfigured"
    assert robot.commands() == [], "unconfigured: nothing commanded"

    assert change_state(ros_node, name, Transition.TRANSITION_CONFIGURE)
    assert lifecycle_state(ros_node, name) == "inactive"
    configured = executor.wait(
        lambda s: s.session_id != "", 10, "the session of configure in ~/status"
    )
    executor.spin(0.5)
    assert robot.commands() == [], "configured, not active: nothing commanded yet"

    assert change_state(ros_node, name, Transition.TRANSITION_ACTIVATE)
    executor.wait(
        lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2,
        30,
        "streaming after activate",
    )
    assert not all(is_hold(c["values"]) for c in robot.commands()), (
        "active: the policy's actions are played"
    )

    # Deactivate mid-stream: from the reply on, only the hold reaches the robot.
    closed_before = executor.log.read_text().count(" closed (ok)")
    assert change_state(ros_node, name, Transition.TRANSITION_DEACTIVATE)
    deactivated_at = time.monotonic()
    assert lifecycle_state(ros_node, name) == "inactive"
    held = executor.wait(
        lambda s: s.paused and s.session_id == "", 5, "held with the session closed"
    )
    requests = held.requests_sent
    executor.spin(1.0)
    after = [c for c in robot.commands() if c["t"] > deactivated_at]
    assert after and all(is_hold(c["values"]) for c in after), (
        "after deactivate: the hold, nothing else"
    )
    assert executor.status.requests_sent == requests, "no requests while inactive"
    assert executor.log.read_text().count(" closed (ok)") == closed_before + 1, (
        "the server closed the session"
    )

    # Activate again: a new session, the policy plays again.
    merged = executor.status.chunks_merged
    assert change_state(ros_node, name, Transition.TRANSITION_ACTIVATE)
    resumed = executor.wait(
        lambda s: not s.paused and s.chunks_merged > merged + 1 and s.session_id,
        20,
        "chunks merged again after activate",
    )
    assert resumed.session_id != configured.session_id and resumed.epoch > configured.epoch
    reactivated_at = time.monotonic()
    executor.spin(0.5)
    assert not all(is_hold(c["values"]) for c in robot.commands() if c["t"] > reactivated_at)

    # Deactivate, cleanup: everything released, nothing commanded any more.
    assert change_state(ros_node, name, Transition.TRANSITION_DEACTIVATE)
    assert change_state(ros_node, name, Transition.TRANSITION_CLEANUP)
    cleaned_at = time.monotonic()
    assert lifecycle_state(ros_node, name) == "unconfigured"
    executor.spin(0.5)
    assert [c for c in robot.commands() if c["t"] > cleaned_at + 0.1] == [], (
        "cleaned up: the control loop is gone"
    )
    refused = call(ros_node, StartPolicy, f"/{name}/start_policy", StartPolicy.Request())
    assert not refused.accepted and "unconfigured, not active" in refused.message, refused.message

    # Configure again (a fresh handshake), then shut down from inactive.
    assert change_state(ros_node, name, Transition.TRANSITION_CONFIGURE)
    assert lifecycle_state(ros_node, name) == "inactive"
    assert change_state(ros_node, name, Transition.TRANSITION_INACTIVE_SHUTDOWN)
    assert lifecycle_state(ros_node, name) == "finalized"
    assert executor.process.poll() is None, "a transition never crashes the process"
    assert executor.stop() == 0


def test_configure_against_a_refusing_server_fails_with_the_reason_and_stays_unconfigured(
    policy_server, launched, ros_node
):
    robot = launched("/refusing_arm")
    swapped = list(robot.executor_parameters()["joint_names"])
    swapped[0], swapped[1] = swapped[1], swapped[0]
    executor = launched.executor(
        "exec_refusing", robot.executor_parameters(autostart=False, joint_names=swapped)
    )
    assert not change_state(ros_node, "exec_refusing", Transition.TRANSITION_CONFIGURE)
    assert lifecycle_state(ros_node, "exec_refusing") == "unconfigured"
    assert spin_until(
        ros_node, lambda: "configure failed: handshake refused" in executor.log.read_text(), 5
    )
    assert executor.process.poll() is None and "Traceback" not in executor.log.read_text()


@pytest.fixture
def goal_executor(policy_server, launched, ros_node):
    """An executor that holds until a goal comes (wait_for_goal), its robot and an action
    client."""
    robot = launched("/goal_arm", commands=[("forward_command", "/goal_arm/commands")])
    # request_timeout_s: a fresh session's first answer takes over 1 s on a loaded 2-core machine.
    executor = launched.executor(
        "exec_goal", robot.executor_parameters(wait_for_goal=True, request_timeout_s=3.0)
    )
    client = ActionClient(ros_node, RunPolicy, "/exec_goal/run_policy")
    assert client.wait_for_server(timeout_sec=WAIT_S)
    executor.wait(
        lambda s: s.paused and s.session_id, 20, "holding with a session, waiting for a goal"
    )
    yield robot, executor, client
    client.destroy()


def test_goals_complete_cancel_and_preempt_and_their_feedback_is_the_status(
    goal_executor, ros_node
):
    robot, executor, client = goal_executor
    assert spin_until(ros_node, lambda: len(robot.commands()) >= 10, 10), (
        "no goal: the hold is commanded"
    )
    assert executor.status.requests_sent == 0, "no goal: nothing requested"
    assert all(is_hold(c["values"]) for c in robot.commands()), "no goal: holding"

    # A goal runs for its max duration and completes. (Long enough for a first chunk on a loaded
    # machine: the goal opens a fresh session first.)
    run = GoalRun(client, ros_node, max_duration_s=5.0, new_episode=True)
    assert run.handle.accepted
    result = run.result()
    assert result.termination == RunPolicy.Result.TERMINATION_COMPLETED, result.reason
    assert result.duration_s == pytest.approx(5.0, abs=0.5) and result.chunks_merged >= 1
    assert result.commands_published > 0 and result.episode == 1
    ended_at = time.monotonic()
    # Feedback at the status period, each one read from the snapshot a ~/status message was made
    # of.
    assert len(run.feedback) >= 5
    statuses = [s for _, s in executor.statuses]
    offsets = None
    for feedback in run.feedback:
        matches = {
            s.commands_published - feedback.commands_published
            for s in statuses
            if (s.state, s.queue_depth, s.episode, s.latency_ms_p95)
            == (feedback.state, feedback.queue_depth, feedback.episode, feedback.latency_ms_p95)
        }
        offsets = matches if offsets is None else offsets & matches
        assert offsets, f"feedback {feedback} matches no ~/status with the same start count"
    assert any(f.state_name == "STREAMING" for f in run.feedback)
    assert max(f.elapsed_s for f in run.feedback) <= 5.0 + 0.5
    executor.spin(0.5)
    assert all(is_hold(c["values"]) for c in robot.commands() if c["t"] > ended_at + 0.1), (
        "after the goal: held"
    )

    # Cancel: holds and ends the episode.
    run = GoalRun(client, ros_node, task="reach the cube")
    run.wait_feedback(
        lambda f: f.commands_published > 10 and f.state_name == "STREAMING", "streaming"
    )
    episode = executor.status.episode
    run.cancel()
    result = run.result()
    cancelled_at = time.monotonic()
    assert result.termination == RunPolicy.Result.TERMINATION_CANCELLED
    executor.wait(lambda s: s.paused and s.episode == episode + 1, 5, "held in the next episode")
    executor.spin(0.3)
    assert all(is_hold(c["values"]) for c in robot.commands() if c["t"] > cancelled_at + 0.1)

    # A new goal preempts the active one; the mirror services start and stop goals too.
    first = GoalRun(client, ros_node)
    first.wait_feedback(lambda f: f.commands_published > 0, "commands")
    second = GoalRun(client, ros_node)
    assert first.result().termination == RunPolicy.Result.TERMINATION_PREEMPTED
    started = call(
        ros_node, StartPolicy, "/exec_goal/start_policy", StartPolicy.Request(max_duration_s=0.0)
    )
    assert started.accepted and started.goal_id, started.message
    assert second.result().termination == RunPolicy.Result.TERMINATION_PREEMPTED, (
        "a service goal preempts too"
    )
    stopped = call(ros_node, StopPolicy, "/exec_goal/stop_policy", StopPolicy.Request())
    assert stopped.success and stopped.goal_id == started.goal_id
    assert stopped.termination == RunPolicy.Result.TERMINATION_CANCELLED
    again = call(ros_node, StopPolicy, "/exec_goal/stop_policy", StopPolicy.Request())
    assert not again.success and again.message == "no goal was running"
