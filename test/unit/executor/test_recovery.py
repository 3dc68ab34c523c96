"""OFFLINE and the way back, on the product's core, worker and handshake against a fake server (no
rclpy graph)."""

from __future__ import annotations

import dataclasses

from lerobot_ros.executor.control.state_machine import ExecutorState as S
from lerobot_ros.executor.goals.goal_runs import GoalRequest
from lerobot_ros.executor.goals.goal_steps import GoalSteps
from lerobot_ros.executor.session import recovery
from lerobot_ros.executor.session.handshake import handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration
from support.executor_harness import CAMERA, JOINTS, connected, counts, feed, heartbeat

ROBOT = RobotDeclaration(JOINTS, (CAMERA,), 3)


def run(core, clock, worker, seconds, dt=0.1):
    end = clock() + seconds
    while clock() < end:
        feed(core, clock)
        worker.step()
        clock.t += dt
        core.control_tick(clock())


def offline(**overrides):
    """Streaming, then the server is deactivated for longer than max_offline_s (5 s)."""
    clock, core, link, worker = connected(
        max_offline_s=5.0, reconnect_backoff_max_s=1.0, **overrides
    )
    run(core, clock, worker, 1.0)
    assert core.state is S.STREAMING
    link.inactive = True
    # the heartbeat timeout passes, the next beat is "a new instance"
    core.on_heartbeat(heartbeat("i2"), clock.t + 3.0)
    run(core, clock, worker, 8.0)
    assert core.state is S.OFFLINE
    return clock, core, link, worker


def resume(core, link, clock, by="~/resume"):
    return recovery.resume(core, lambda: handshake(core, link, ROBOT, clock), clock, by)


def test_an_inactive_server_past_max_offline_s_is_a_hold_that_says_what_the_server_said():
    clock, core, link, worker = offline()
    reason = counts(core, clock).reason
    assert "the server is inactive (lifecycle state 'inactive')" in reason, reason
    assert "still loading" not in reason
    # It keeps holding: every tick commands the measured position, the queue is empty.
    for _ in range(5):
        command = core.control_tick(clock())
        assert command is not None
        clock.t += 0.1
    assert core.snapshot(clock()).telemetry.queue_depth == 0
    problem = resume(core, link, clock)
    assert problem and "the server is inactive" in problem and core.state is S.OFFLINE


def test_a_server_back_is_reconnected_on_its_own_and_motion_restarts_only_on_resume_from_a_fresh_observation():  # noqa: E501 - the test's id names what it checks
    clock, core, link, worker = offline()
    link.inactive = False
    run(core, clock, worker, 3.0)
    assert core.state is S.OFFLINE and core.offline == (True, True)
    assert "a session is open again: holding until resumed" in counts(core, clock).reason
    sent = len(link.sent)
    run(core, clock, worker, 3.0)
    assert len(link.sent) == sent, "no request while holding for a resume"
    assert resume(core, link, clock) is None
    run(core, clock, worker, 1.0)
    assert core.state is S.STREAMING
    first = link.sent[sent]
    assert first.snapshot.left_over_model is None or len(first.snapshot.left_over_model) == 0, (
        "no RTC prefix"
    )
    assert first.request.session_id == core.identity.session_id


def test_auto_resume_streams_again_once_the_server_is_back():
    clock, core, link, worker = offline(auto_resume=True)
    link.inactive = False
    run(core, clock, worker, 3.0)
    assert core.state is S.STREAMING


def test_resume_after_the_session_was_closed_handshakes_first():
    clock, core, link, worker = offline()
    link.inactive = False
    run(core, clock, worker, 3.0)
    core.end_session()  # a lifecycle deactivation closed it
    sessions = link.sessions
    assert resume(core, link, clock, "lifecycle activate") is None
    assert link.sessions == sessions + 1 and core.state is S.STREAMING


def test_dead_for_a_changed_model_stays_dead_on_activate_and_comes_back_with_the_same_model():
    clock, core, link, worker = connected()
    original = link.capabilities
    link.capabilities = dataclasses.replace(original, model_fingerprint="e" * 16)
    core.check_model(link.capabilities, clock())
    assert core.state is S.DEAD
    problem = resume(core, link, clock, "lifecycle activate")
    assert problem and "fingerprint" in problem and core.state is S.DEAD
    link.capabilities = original
    assert resume(core, link, clock, "lifecycle activate") is None and core.state is S.STREAMING


def test_a_new_goal_is_a_resume_and_is_refused_with_the_reason_while_no_server_takes_the_robot():
    clock, core, link, worker = offline()
    steps = GoalSteps(lambda text: None, lambda: None, clock=clock)
    steps.attach(core, core.settings)
    steps.recover = lambda by: resume(core, link, clock, by)
    refusal = steps.start("g1", GoalRequest(task="reach"), True, "active")
    assert refusal and "OFFLINE" in refusal and "inactive" in refusal
    link.inactive = False
    assert steps.start("g2", GoalRequest(task="reach"), True, "active") is None
    assert core.state is S.STREAMING
