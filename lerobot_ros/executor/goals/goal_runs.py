"""RunPolicy goals: which one is active, when and why it ends, what it reports.

Invariants:

* at most one goal is active; starting another ends the active one first,
  as ``preempted`` (its result is kept for its waiter);
* every goal ends exactly once, with one termination reason: ``completed``
  (ran its ``max_duration_s`` and merged at least one chunk), ``timeout``
  (its ``max_duration_s`` passed without a merged chunk: the policy never
  ran), ``cancelled`` (cancel or StopPolicy), ``preempted``, ``failed`` (the
  server refused one of its requests, e.g. a task it is pinned against, or a
  (re-)handshake failed during it: the server is gone or refuses the robot;
  or the executor went OFFLINE) or ``dead`` (the fail-safe went DEAD);
* counts and feedback are the executor's counters since the goal started,
  read from the same telemetry as ``~/status``.

Plain Python: the node feeds ``Progress`` samples (from the core's snapshot)
and applies what an end means for the robot (hold, end the episode).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from lerobot_ros.protocol.status import ExecutorState, Termination

#: Results kept for waiters that have not collected theirs yet.
KEPT_RESULTS = 16


@dataclass(frozen=True)
class GoalRequest:
    task: str = ""  # empty: the session's task
    max_duration_s: float = 0.0  # 0: until cancelled, preempted or failed
    new_episode: bool = False

    def problem(self) -> str | None:
        """Why this goal cannot run, or None."""
        duration = self.max_duration_s
        if duration != duration or duration < 0 or duration == float("inf"):
            return (
                "max_duration_s must be a finite number of seconds >= 0 (0: no limit), got "
                f"{duration}"
            )
        return None


@dataclass(frozen=True)
class Progress:
    """One sample of the executor, as its telemetry and the core's snapshot tell it."""

    now_s: float
    state: ExecutorState
    state_reason: str
    episode: int
    queue_depth: int
    latency_ms_p95: float
    commands_published: int
    requests_sent: int
    chunks_merged: int
    request_rejections: int
    last_rejection_reason: str
    handshake_failures: int
    last_handshake_error: str

    @classmethod
    def of(cls, snapshot, now_s: float) -> Progress:
        """From a ``core.CoreSnapshot``."""
        t = snapshot.telemetry
        return cls(
            now_s,
            ExecutorState(t.state),
            t.reason,
            t.episode,
            t.queue_depth,
            t.latency_ms_p95,
            t.commands_published,
            t.requests_sent,
            t.chunks_merged,
            t.request_rejections,
            t.last_rejection_reason,
            snapshot.handshake_failures,
            snapshot.last_handshake_error,
        )


@dataclass(frozen=True)
class Feedback:
    state: int
    state_name: str
    queue_depth: int
    commands_published: int  # since the goal started
    latency_ms_p95: float
    episode: int
    elapsed_s: float


@dataclass(frozen=True)
class GoalResult:
    goal_id: str
    termination: Termination
    reason: str
    duration_s: float
    commands_published: int
    requests_sent: int
    chunks_merged: int
    episode: int


@dataclass(frozen=True)
class ActiveGoal:
    goal_id: str
    request: GoalRequest
    started: Progress  # counters at the start; differences are the goal's own


class GoalBook:
    """The active goal, its end and the results not yet collected (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active: ActiveGoal | None = None
        self._results: OrderedDict[str, GoalResult] = OrderedDict()
        self._ended = threading.Condition(self._lock)

    @property
    def active(self) -> ActiveGoal | None:
        with self._lock:
            return self._active

    def start(self, goal_id: str, request: GoalRequest, progress: Progress) -> GoalResult | None:
        """Make ``goal_id`` the active goal; returns the preempted goal's result, if one was
        active."""
        problem = request.problem()
        if problem:
            raise ValueError(problem)
        with self._lock:
            preempted = None
            if self._active is not None:
                preempted = self._end(
                    Termination.PREEMPTED, f"preempted by goal {goal_id}", progress
                )
            self._active = ActiveGoal(goal_id, request, progress)
            return preempted

    def cancel(
        self, progress: Progress, goal_id: str | None = None, reason: str = "cancelled"
    ) -> GoalResult | None:
        """End the active goal (only if it is ``goal_id``, when given) as cancelled; None when none
        was."""
        with self._lock:
            if self._active is None or (goal_id is not None and self._active.goal_id != goal_id):
                return None
            return self._end(Termination.CANCELLED, reason, progress)

    def end_if_over(self, progress: Progress) -> GoalResult | None:
        """End the active goal when ``progress`` says it is over; returns its result then."""
        with self._lock:
            goal = self._active
            if goal is None:
                return None
            verdict = termination_of(goal, progress)
            return None if verdict is None else self._end(*verdict, progress)

    def feedback(self, progress: Progress) -> Feedback | None:
        with self._lock:
            goal = self._active
            if goal is None:
                return None
            return Feedback(
                int(progress.state),
                progress.state.name,
                progress.queue_depth,
                progress.commands_published - goal.started.commands_published,
                progress.latency_ms_p95,
                progress.episode,
                progress.now_s - goal.started.now_s,
            )

    def telemetry(self) -> dict[str, str]:
        """The goal fields of ExecutorStatus: the active goal, and the latest that ended and
        how."""
        with self._lock:
            last = next(reversed(self._results.values()), None)
            return {
                "goal_id": self._active.goal_id if self._active is not None else "",
                "last_goal_id": last.goal_id if last is not None else "",
                "last_goal_termination": last.termination.value if last is not None else "",
            }

    def result(self, goal_id: str) -> GoalResult | None:
        """The ended goal's result (kept until ``KEPT_RESULTS`` newer ones), or None while it
        runs."""
        with self._lock:
            return self._results.get(goal_id)

    def wait_ended(self, goal_id: str, timeout_s: float) -> GoalResult | None:
        """Wait up to ``timeout_s`` for ``goal_id`` to end; its result, or None if it still
        runs."""
        with self._ended:
            self._ended.wait_for(lambda: goal_id in self._results, timeout=timeout_s)
            return self._results.get(goal_id)

    def _end(self, termination: Termination, reason: str, progress: Progress) -> GoalResult:
        goal = self._active
        start = goal.started
        result = GoalResult(
            goal.goal_id,
            termination,
            reason,
            progress.now_s - start.now_s,
            progress.commands_published - start.commands_published,
            progress.requests_sent - start.requests_sent,
            progress.chunks_merged - start.chunks_merged,
            progress.episode,
        )
        self._active = None
        self._results[goal.goal_id] = result
        while len(self._results) > KEPT_RESULTS:
            self._results.popitem(last=False)
        self._ended.notify_all()
        return result


def termination_of(goal: ActiveGoal, progress: Progress) -> tuple[Termination, str] | None:
    """Why ``goal`` is over at ``progress``, or None while it runs (first matching rule wins)."""
    start = goal.started
    if progress.state is ExecutorState.DEAD:
        return Termination.DEAD, f"the executor is DEAD: {progress.state_reason}"
    if progress.state is ExecutorState.OFFLINE:
        return Termination.FAILED, f"the executor went OFFLINE: {progress.state_reason}"
    if progress.request_rejections > start.request_rejections:
        return (
            Termination.FAILED,
            f"the server refused the goal's request: {progress.last_rejection_reason}",
        )
    if progress.handshake_failures > start.handshake_failures:
        return Termination.FAILED, f"no session with the server: {progress.last_handshake_error}"
    duration = goal.request.max_duration_s
    if duration and progress.now_s - start.now_s >= duration:
        if progress.chunks_merged > start.chunks_merged:
            return Termination.COMPLETED, f"ran for max_duration_s {duration:g}"
        return Termination.TIMEOUT, f"max_duration_s {duration:g} passed without a merged chunk"
    return None
