"""RunPolicy goal bookkeeping (goals.py) on a real executor core driven by a fake server link."""

from __future__ import annotations

import threading

import pytest

from lerobot_ros.executor.goals.goal_runs import KEPT_RESULTS, GoalBook, GoalRequest, Progress
from lerobot_ros.protocol.status import ExecutorState, Termination
from support.executor_harness import connected, feed


def progress(core, clock) -> Progress:
    return Progress.of(core.snapshot(clock()), clock())


def stream(core, clock, worker, ticks: int) -> None:
    """``ticks`` control periods with fresh sensors and the worker's requests answered."""
    for _ in range(ticks):
        feed(core, clock)
        worker.step()
        core.control_tick(clock())
        clock.t += 0.1


def test_a_goal_completes_at_its_max_duration_with_its_own_counts():
    clock, core, link, worker = connected()
    book = GoalBook()
    stream(core, clock, worker, 3)
    before = progress(core, clock)
    assert book.start("g1", GoalRequest("pick", 1.0), before) is None
    stream(core, clock, worker, 5)
    assert book.end_if_over(progress(core, clock)) is None, "0.5 s of a 1 s goal: still running"
    feedback = book.feedback(progress(core, clock))
    assert feedback.state_name == "STREAMING" and feedback.elapsed_s == pytest.approx(0.5)
    stream(core, clock, worker, 6)  # past 1 s (whole ticks of 0.1 s add up to just below 1.0)
    now = progress(core, clock)
    result = book.end_if_over(now)
    assert result.termination is Termination.COMPLETED and result.goal_id == "g1"
    assert result.duration_s == pytest.approx(1.1)
    assert result.commands_published == now.commands_published - before.commands_published == 11
    assert result.chunks_merged == now.chunks_merged - before.chunks_merged >= 1
    assert book.active is None and book.result("g1") == result
    assert book.end_if_over(now) is None, "a goal ends once"


def test_max_duration_without_a_merged_chunk_is_a_timeout():
    clock, core, link, worker = connected()
    link.silent = True
    book = GoalBook()
    book.start("g", GoalRequest(max_duration_s=0.3), progress(core, clock))
    clock.t += 0.5
    result = book.end_if_over(progress(core, clock))
    assert result.termination is Termination.TIMEOUT and "without a merged chunk" in result.reason


def test_no_max_duration_runs_until_cancelled_and_cancel_names_only_its_goal():
    clock, core, link, worker = connected()
    book = GoalBook()
    book.start("g", GoalRequest(), progress(core, clock))
    clock.t += 1000
    assert book.end_if_over(progress(core, clock)) is None
    assert book.cancel(progress(core, clock), "other") is None, "a stale cancel ends no other goal"
    result = book.cancel(progress(core, clock), "g", "stopped by stop_policy")
    assert (
        result.termination is Termination.CANCELLED and result.reason == "stopped by stop_policy"
    )
    assert book.cancel(progress(core, clock)) is None, "nothing left to cancel"


def test_a_new_goal_preempts_the_active_one():
    clock, core, link, worker = connected()
    book = GoalBook()
    book.start("old", GoalRequest("a"), progress(core, clock))
    preempted = book.start("new", GoalRequest("b", 2.0), progress(core, clock))
    assert preempted.goal_id == "old" and preempted.termination is Termination.PREEMPTED
    assert "new" in preempted.reason and book.active.goal_id == "new"
    assert book.wait_ended("old", 0.0) == preempted


def test_status_names_the_active_goal_the_last_that_ended_and_the_task():
    clock, core, link, worker = connected()
    book = GoalBook()
    assert book.telemetry() == {"goal_id": "", "last_goal_id": "", "last_goal_termination": ""}
    book.start("first", GoalRequest("a"), progress(core, clock))
    assert book.telemetry()["goal_id"] == "first"
    book.start("second", GoalRequest("b"), progress(core, clock))
    assert book.telemetry() == {
        "goal_id": "second",
        "last_goal_id": "first",
        "last_goal_termination": "preempted",
    }
    book.cancel(progress(core, clock))
    assert book.telemetry() == {
        "goal_id": "",
        "last_goal_id": "second",
        "last_goal_termination": "cancelled",
    }
    core.set_task("")
    assert core.snapshot(clock()).telemetry.task == core.settings.task, (
        "no goal task: the session's is reported"
    )
    core.set_task("pick the cube")
    assert core.snapshot(clock()).telemetry.task == "pick the cube"


def test_a_server_refusal_during_the_goal_fails_it_with_the_servers_reason():
    clock, core, link, worker = connected()
    book = GoalBook()
    book.start("g", GoalRequest("other task"), progress(core, clock))
    link.refusal = "task 'other task' sent to a server pinned to 'pick'"
    stream(core, clock, worker, 2)
    result = book.end_if_over(progress(core, clock))
    assert result.termination is Termination.FAILED and "pinned to 'pick'" in result.reason


def test_a_failed_handshake_during_the_goal_fails_it_and_dead_is_dead():
    clock, core, link, worker = connected()
    book = GoalBook()
    book.start("g", GoalRequest(), progress(core, clock))
    core.handshake_failed("no policy server answered on /lerobot/get_status within 1 s", clock())
    result = book.end_if_over(progress(core, clock))
    assert (
        result.termination is Termination.FAILED and "no policy server answered" in result.reason
    )

    book.start("h", GoalRequest(), progress(core, clock))
    # another model: DEAD
    core.check_model(dataclasses_replace_fingerprint(link.capabilities), clock())
    assert core.state is ExecutorState.DEAD
    assert book.end_if_over(progress(core, clock)).termination is Termination.DEAD


def dataclasses_replace_fingerprint(capabilities):
    import dataclasses

    return dataclasses.replace(capabilities, model_fingerprint="0" * 16)


@pytest.mark.parametrize("duration", [-1.0, float("nan"), float("inf")])
def test_a_goal_with_an_impossible_duration_is_refused(duration):
    clock, core, link, worker = connected()
    problem = GoalRequest(max_duration_s=duration).problem()
    assert (
        "max_duration_s must be a finite number of seconds >= 0" in problem
        and str(duration) in problem
    )
    with pytest.raises(ValueError, match="max_duration_s"):
        GoalBook().start("g", GoalRequest(max_duration_s=duration), progress(core, clock))


def test_a_waiter_wakes_when_its_goal_ends_and_old_results_are_bounded():
    clock, core, link, worker = connected()
    book = GoalBook()
    book.start("g", GoalRequest(), progress(core, clock))
    ended = []
    waiter = threading.Thread(target=lambda: ended.append(book.wait_ended("g", 5.0)))
    waiter.start()
    book.cancel(progress(core, clock))
    waiter.join(5.0)
    assert ended and ended[0].termination is Termination.CANCELLED
    for n in range(KEPT_RESULTS + 1):  # each start but the last preempts one
        book.start(f"n{n}", GoalRequest(), progress(core, clock))
    assert book.result("g") is None, (
        "the oldest result is dropped once KEPT_RESULTS newer ones exist"
    )
