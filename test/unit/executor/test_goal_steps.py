"""The steps a RunPolicy goal's start and end take on the robot, in order (goal_steps.py), without
rclpy.

A real executor core behind a fake server link; the action goal handle is a
recording stand-in, since the steps only keep it and hand it back.
"""

from __future__ import annotations

import threading

import pytest

from lerobot_ros.executor.goals.goal_runs import GoalRequest, GoalResult, Progress
from lerobot_ros.executor.goals.goal_steps import HOLD_GOAL, GoalSteps, action_verdict
from lerobot_ros.protocol.status import ExecutorState, Termination
from support.executor_harness import connected, counts, feed


def steps_on(**overrides):
    """Goal steps attached to a streaming core; the log and the "status now" wake-ups recorded."""
    clock, core, link, worker = connected(**overrides)
    log, wakes = [], []
    steps = GoalSteps(log.append, lambda: wakes.append(1), clock=clock)
    steps.attach(core, core.settings)
    return clock, core, link, worker, steps, log, wakes


def played(core, clock, worker) -> None:
    """A chunk merged and queued (what a goal's start or end must drop)."""
    feed(core, clock)
    worker.step()
    assert counts(core, clock).queue_depth > 0


def test_a_goal_is_refused_while_the_executor_is_not_active_and_names_the_state():
    clock, core, link, worker, steps, log, wakes = steps_on()
    problem = steps.start("g", GoalRequest("pick"), active=False, lifecycle_state="inactive")
    assert problem == "the executor is inactive, not active: activate it first"
    assert steps.book.active is None and wakes == []
    bad = steps.start(
        "g", GoalRequest("pick", max_duration_s=-1.0), active=True, lifecycle_state="active"
    )
    assert "max_duration_s" in bad and steps.book.active is None


def test_a_start_sets_the_task_drops_the_queue_moves_the_episode_and_lets_go_of_the_goal_hold():
    clock, core, link, worker, steps, log, wakes = steps_on(wait_for_goal=True)
    core.pause(clock(), HOLD_GOAL)
    feed(core, clock)
    assert not core.request_due(clock()), "held for a goal: nothing is requested"
    assert (
        steps.start(
            "g", GoalRequest("stack", new_episode=True), active=True, lifecycle_state="active"
        )
        is None
    )
    assert steps.book.active.goal_id == "g" and not core.holds(HOLD_GOAL)
    telemetry = counts(core, clock)
    assert (telemetry.task, telemetry.episode, telemetry.queue_depth) == ("stack", 1, 0)
    assert (
        core.state is ExecutorState.RECONNECTING
        and "goal g started: opening a fresh session" in telemetry.reason
    )
    assert wakes == [1] and log[-1].startswith("goal g started: task 'stack'")


def test_a_new_goal_preempts_the_active_one_and_its_queue_is_never_played_for_the_next():
    clock, core, link, worker, steps, log, wakes = steps_on()
    steps.start(
        "old", GoalRequest("a"), active=True, lifecycle_state="active", handle="old handle"
    )
    played(core, clock, worker)
    steps.start("new", GoalRequest("b"), active=True, lifecycle_state="active")
    assert steps.book.result("old").termination is Termination.PREEMPTED
    assert counts(core, clock).queue_depth == 0 and counts(core, clock).task == "b"
    assert any(line.startswith("goal old: preempted") for line in log)


def test_an_end_restores_the_task_drops_the_queue_holds_again_and_a_cancel_ends_the_episode():
    clock, core, link, worker, steps, log, wakes = steps_on(wait_for_goal=True, task="default")
    steps.start("g", GoalRequest("pick"), active=True, lifecycle_state="active")
    clock.t += 5.0
    worker.step()  # the fresh session the start asked for
    played(core, clock, worker)
    episode = counts(core, clock).episode
    result = steps.cancel(None, "stopped by stop_policy")
    assert (
        result.termination is Termination.CANCELLED and result.reason == "stopped by stop_policy"
    )
    telemetry = counts(core, clock)
    assert (telemetry.task, telemetry.queue_depth, telemetry.episode) == (
        "default",
        0,
        episode + 1,
    )
    assert core.holds(HOLD_GOAL) and telemetry.paused
    assert steps.cancel(None, "again") is None, "a goal ends once"


def test_a_goal_over_by_its_duration_ends_on_the_status_sample_and_keeps_the_episode():
    clock, core, link, worker, steps, log, wakes = steps_on()
    steps.start(
        "g",
        GoalRequest("pick", max_duration_s=0.5),
        active=True,
        lifecycle_state="active",
        handle="h",
    )
    played(core, clock, worker)
    follow = steps.follow(Progress.of(core.snapshot(clock()), clock()))
    assert follow is not None and follow[1] == "h" and follow[0].state_name == "STREAMING"
    clock.t += 0.6
    assert steps.follow(Progress.of(core.snapshot(clock()), clock())) is None
    result = steps.book.result("g")
    assert result.termination is Termination.COMPLETED and counts(core, clock).episode == 0
    assert not core.holds(HOLD_GOAL), "without wait_for_goal an ended goal holds nothing"


def test_feedback_goes_only_to_an_action_goal():
    clock, core, link, worker, steps, log, wakes = steps_on()
    # StartPolicy: no handle
    steps.start("g", GoalRequest("pick"), active=True, lifecycle_state="active")
    assert steps.follow(Progress.of(core.snapshot(clock()), clock())) is None
    assert steps.book.active.goal_id == "g"


def test_a_detached_executor_has_no_goal_to_end():
    clock, core, link, worker, steps, log, wakes = steps_on()
    steps.start("g", GoalRequest("pick"), active=True, lifecycle_state="active")
    steps.attach(None, None)
    assert steps.cancel(None, "cleanup") is None


def test_a_waiter_returns_the_result_and_a_cancel_request_ends_its_goal():
    clock, core, link, worker, steps, log, wakes = steps_on()
    steps.start("g", GoalRequest("pick"), active=True, lifecycle_state="active")
    cancel = threading.Event()
    threading.Timer(0.1, cancel.set).start()
    result = steps.wait("g", cancel.is_set)
    assert result.termination is Termination.CANCELLED and result.reason == "cancelled"


@pytest.mark.parametrize(
    "termination, cancel_requested, verdict",
    [
        (Termination.CANCELLED, True, "canceled"),
        # StopPolicy or deactivation ended it, not the client
        (
            Termination.CANCELLED,
            False,
            "abort",
        ),
        (Termination.COMPLETED, False, "succeed"),
        (Termination.TIMEOUT, False, "abort"),
        (Termination.PREEMPTED, True, "abort"),
    ],
)
def test_how_an_action_goal_ends(termination, cancel_requested, verdict):
    result = GoalResult("g", termination, "", 1.0, 0, 0, 0, 0)
    assert action_verdict(result, cancel_requested) == verdict
