"""The order of steps when a RunPolicy goal starts or ends, and what each step does to the robot.

``goals.GoalBook`` keeps the book (which goal is active, how it ended);
this module applies it to the executor core. Invariants:

* a goal starts only while the executor is active, with a valid request;
  the refusal names the lifecycle state it is in;
* a start runs, in this order: the active goal ends as preempted, the goal's
  task is set, what is queued (planned for the previous goal, or none) and
  the request in flight are dropped, the episode moves when the goal asks
  for a new one, and the "no goal" hold is let go of with a fresh session
  (held, the old one may have gone idle on the server);
* an end (cancel, StopPolicy, deactivation, or the book's verdict on a
  status sample) runs, in this order: the ``task`` parameter again, the
  goal's queue dropped (never played for the next goal), the "no goal" hold
  again when ``wait_for_goal``, and a new episode when it was cancelled;
* a start and an end never interleave (one re-entrant lock), every goal
  ends once, and an ended goal's handle is forgotten.

Plain Python: the node's action server and services call these steps and
only turn their values into ROS messages (``goal_server.py``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.goals.goal_runs import (
    Feedback,
    GoalBook,
    GoalRequest,
    GoalResult,
    Progress,
)
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.status import Termination

#: The name the "no goal" hold goes by (core.pause / resume).
HOLD_GOAL = "goal"

#: How often a goal's waiter looks at its cancel request (seconds).
GOAL_POLL_S = 0.05


def action_verdict(result: GoalResult, cancel_requested: bool) -> str:
    """How the action goal ends: ``canceled`` (it asked and was cancelled), ``succeed``
    (completed), ``abort``."""
    if result.termination is Termination.CANCELLED and cancel_requested:
        return "canceled"
    return "succeed" if result.termination is Termination.COMPLETED else "abort"


class GoalSteps:
    """Starts and ends goals on the attached core (thread-safe)."""

    def __init__(
        self,
        log: Callable[[str], None],
        status_now: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.book = GoalBook()
        self.log, self.status_now, self.clock = log, status_now, clock
        self._lock = threading.RLock()
        self._handles: dict[
            str, Any
        ] = {}  # goal id -> its action goal handle (StartPolicy goals have none)
        self._core: ExecutorCore | None = None
        self._settings: ExecutorSettings | None = None
        # A goal is an explicit resume from OFFLINE: the node sets this to ``recovery.resume`` on
        # its link.
        self.recover: Callable[[str], str | None] = lambda by: None

    def attach(self, core: ExecutorCore | None, settings: ExecutorSettings | None) -> None:
        """The core goals act on from now (configure), or None (cleanup): nothing to end then."""
        with self._lock:
            self._core, self._settings = core, settings

    def progress(self, now_s: float) -> Progress:
        return Progress.of(self._core.snapshot(now_s), now_s)

    def refusal(self, request: GoalRequest, active: bool, lifecycle_state: str) -> str | None:
        """Why a goal cannot start now, or None."""
        if not active:
            return f"the executor is {lifecycle_state}, not active: activate it first"
        return request.problem()

    def start(
        self,
        goal_id: str,
        request: GoalRequest,
        active: bool,
        lifecycle_state: str,
        handle: Any = None,
    ) -> str | None:
        """Make ``goal_id`` the active goal (the old one ends as preempted); the refusal, if
        any."""
        with self._lock:
            problem = self.refusal(request, active, lifecycle_state)
            if problem:
                return problem
            problem = self.recover(f"goal {goal_id}")
            if problem:
                return f"the executor is OFFLINE and could not resume: {problem}"
            core, now = self._core, self.clock()
            preempted = self.book.start(goal_id, request, self.progress(now))
            if preempted is not None:
                self._handles.pop(preempted.goal_id, None)
                self.log(
                    f"goal {preempted.goal_id}: {preempted.termination.value} ({preempted.reason})"
                )
            core.set_task(request.task)
            core.clear_queue()
            if request.new_episode:
                # The server moves the session's episode with the first observation that names it.
                core.reset_episode()
            if core.holds(HOLD_GOAL):
                core.resume(now, HOLD_GOAL)
                core.reopen(now, f"goal {goal_id} started: opening a fresh session")
            if handle is not None:
                self._handles[goal_id] = handle
            self.log(
                f"goal {goal_id} started: task {request.task!r}, max_duration_s "
                f"{request.max_duration_s:g}, new_episode {request.new_episode}"
            )
            self.status_now()
            return None

    def cancel(self, goal_id: str | None, reason: str) -> GoalResult | None:
        """End the active goal (``goal_id``'s only, when given) as cancelled; None when none
        was."""
        with self._lock:
            if self._core is None:
                return None
            result = self.book.cancel(self.progress(self.clock()), goal_id, reason)
            if result is not None:
                self._ended(result)
            return result

    def wait(self, goal_id: str, cancel_requested: Callable[[], bool]) -> GoalResult:
        """Block until ``goal_id`` ends; a cancel request ends it as cancelled."""
        result = None
        while result is None:
            result = self.book.wait_ended(goal_id, GOAL_POLL_S)
            if result is None and cancel_requested():
                result = self.cancel(goal_id, "cancelled") or self.book.result(goal_id)
        return result

    def follow(self, progress: Progress) -> tuple[Feedback, Any] | None:
        """End the active goal when ``progress`` says it is over; else its feedback and action
        handle, if any."""
        with self._lock:
            ended = self.book.end_if_over(progress)
            if ended is not None:
                self._ended(ended)
                return None
            feedback, goal = self.book.feedback(progress), self.book.active
            handle = self._handles.get(goal.goal_id) if goal is not None else None
        return None if feedback is None or handle is None else (feedback, handle)

    def _ended(self, result: GoalResult) -> None:
        """What a goal's end does to the robot (under the lock)."""
        core, settings, now = self._core, self._settings, self.clock()
        self._handles.pop(result.goal_id, None)
        core.set_task(settings.task)
        core.clear_queue()
        if settings.wait_for_goal:
            core.pause(now, HOLD_GOAL)
        if result.termination is Termination.CANCELLED:
            core.reset_episode()
        self.log(
            f"goal {result.goal_id}: {result.termination.value} ({result.reason}); "
            f"{result.commands_published} commands, {result.chunks_merged} chunks merged"
        )
        self.status_now()
