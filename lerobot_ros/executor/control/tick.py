"""The control tick: what the robot is commanded this tick, and the queue it plays from.

Owns the action queue, the playback (``interpolation.Playback``), the safety
envelope, the smoothness figures and the last command. Invariants enforced here:

* the tick never blocks and never touches the network: it asks the fail-safe
  what to do, pops at most one action, passes whatever it will publish through
  the safety envelope, and returns it; at a control rate above ``fps`` it
  commands the point between the playing action and the next one, and the
  fail-safe judges that segment's older end, every tick;
* a command is always checked against the last one sent (or, before any, the
  measured position): the envelope's step limit holds across a fallback, a
  merge and a settings change;
* a merged chunk's rows carry their observation's sensor time, so the
  staleness bound holds per row.

Not thread-safe: the executor core calls it under its one lock.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from lerobot_ros.executor.control.action_queue import ActionQueue, QueueSnapshot
from lerobot_ros.executor.control.failsafe_config import fallback_action
from lerobot_ros.executor.control.interpolation import Playback, Row, step_per_tick
from lerobot_ros.executor.control.safety import SafetyEnvelope
from lerobot_ros.executor.control.smoothness import SmoothnessTracker
from lerobot_ros.executor.control.state_machine import FailSafe, TickAction
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.status import ExecutorState

#: The tick's counters since start-up, named as in ExecutorTelemetry.
TICK_COUNTERS = (
    "commands_published",
    "starvation_ticks",
    "fallback_ticks",
    "safety_interventions",
)


def envelope_for(settings: ExecutorSettings) -> SafetyEnvelope:
    """The safety envelope the settings ask for, its step limit per control tick."""
    return SafetyEnvelope.from_parameters(
        settings.joint_names,
        settings.joint_lower_limits,
        settings.joint_upper_limits,
        step_per_tick(settings.max_step_per_tick, settings.fps, settings.command_rate_hz),
        reject_non_finite=settings.reject_non_finite,
    )


@dataclass(frozen=True)
class TickOutcome:
    """One tick: the command to publish (None: nothing), and whether the fail-safe lost the
    serving replica during it (its heartbeat went silent: it is RECONNECTING now)."""

    command: np.ndarray | None
    heartbeat_lost: bool = False


@dataclass(frozen=True)
class MergeFigures:
    """What a merge did to the queue, for ~/status."""

    delay_steps: int  # the chunk's latency in control steps
    trimmed_rows: int  # rows of it replace mode skipped


class ControlTick:
    """The queue, its playback and the envelope, ticked at the control rate."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self._settings = settings
        self._dim = len(settings.joint_names)
        self._queue = ActionQueue(rtc_enabled=False, action_dim=self._dim)
        self._playback = Playback(settings.fps, settings.command_rate_hz)
        self._envelope = envelope_for(settings)
        self._smoothness = SmoothnessTracker()
        self._last_commanded: np.ndarray | None = None
        self._counts: Counter[str] = Counter()
        self._last_merge = MergeFigures(delay_steps=0, trimmed_rows=0)

    def change_settings(self, settings: ExecutorSettings, envelope: SafetyEnvelope) -> None:
        """New runtime settings (safety limits, fallback), swapped whole with their envelope."""
        self._settings, self._envelope = settings, envelope

    # ------------------------------------------------------------------ the tick

    def _row(self, offset: int) -> Row | None:
        peeked = self._queue.peek(offset)
        return None if peeked is None else Row(*peeked)

    def tick(
        self,
        now_s: float,
        failsafe: FailSafe,
        measured_positions: Callable[[], np.ndarray | None],
    ) -> TickOutcome:
        """This control tick's command in joint order (None to publish nothing)."""
        position = self._playback.next_position()
        segment = self._playback.segment(
            position, self._row(0), self._row(1) if position.new_row else None
        )
        # A row that is playing covers its own period: only a tick due to pop
        # the next row can find the queue empty.
        depth = self._queue.qsize() + (0 if position.new_row else 1)
        decision = failsafe.tick(now_s, depth, None if segment is None else segment.age_s(now_s))
        lost = any(t.to_state is ExecutorState.RECONNECTING for t in decision.transitions)
        if decision.clear_queue:
            self._queue.clear()
            self._smoothness.queue_cleared()
        if decision.action is not TickAction.EXECUTE:
            self._playback.stop()
        if decision.action is TickAction.NOTHING:
            return TickOutcome(None, lost)
        # OFFLINE holds on purpose: not a starved queue.
        if depth == 0 and not failsafe.paused and decision.state is not ExecutorState.OFFLINE:
            self._counts["starvation_ticks"] += 1
        action = None
        if decision.action is TickAction.EXECUTE:
            if position.new_row:
                self._smoothness.action_executed(self._queue.get())
            self._playback.played(segment)
            action = segment.command()
        if action is None:
            self._counts["fallback_ticks"] += 1
            action = fallback_action(
                decision.fallback_mode or self._settings.fallback,
                self._last_commanded,
                measured_positions(),
                self._dim,
            )
            if action is None:
                return TickOutcome(None, lost)
        return TickOutcome(self._through_envelope(action, measured_positions), lost)

    def _through_envelope(
        self, action: np.ndarray, measured_positions: Callable[[], np.ndarray | None]
    ) -> np.ndarray | None:
        reference = (
            self._last_commanded if self._last_commanded is not None else measured_positions()
        )
        result = self._envelope.apply(action, reference)
        if result.intervened:
            self._counts["safety_interventions"] += 1
        if result.action is None:
            return None
        self._last_commanded = result.action
        self._counts["commands_published"] += 1
        return result.action

    # ----------------------------------------------------------------- the queue

    def clear(self) -> None:
        """Drop the queued actions (planned for another goal, session or hold)."""
        self._queue.clear()
        self._playback.stop()
        self._smoothness.queue_cleared()

    def episode_reset(self) -> None:
        self._queue.clear()
        self._playback.stop()
        self._smoothness.episode_reset()

    def fresh_queue(self, rtc_enabled: bool) -> None:
        """A new, empty queue in the session's merge mode (append, or RTC replace)."""
        self._queue = ActionQueue(rtc_enabled=rtc_enabled, action_dim=self._dim)
        self._smoothness.queue_cleared()
        self._playback.stop()

    def queued_time_s(self) -> float:
        return self._queue.queued_time_s(self._settings.fps)

    def snapshot(self, max_steps: int | None = None) -> QueueSnapshot:
        """The unexecuted rows (at most ``max_steps``) and the index a request leaves at."""
        return self._queue.snapshot(max_steps=max_steps)

    def merge(
        self,
        snapshot: QueueSnapshot,
        actions_model: np.ndarray,
        actions_robot: np.ndarray,
        delay_steps: int,
        source_time_s: float,
    ) -> None:
        """A chunk answering a request that left with ``snapshot`` of this queue, merged
        (``ActionQueue.merge``: replace with delay trimming under RTC, append otherwise)."""
        queued_before = self._queue.get_processed_left_over()
        consumed = self._queue.get_action_index() - snapshot.action_index
        if snapshot.left_over_robot is not None and consumed > 0:
            self._smoothness.overlap_measured(snapshot.left_over_robot[:consumed], actions_robot)
        trimmed = self._queue.merge(
            actions_model,
            actions_robot,
            real_delay=delay_steps,
            action_index_before_inference=snapshot.action_index,
            source_time_s=source_time_s,
        )
        self._last_merge = MergeFigures(delay_steps, trimmed)
        self._smoothness.chunk_merged(
            queued_before if queued_before is not None else np.empty((0, self._dim)),
            self._queue.rtc_enabled,
        )

    # ----------------------------------------------------------------- readers

    @property
    def depth(self) -> int:
        return self._queue.qsize()

    def next_action_age_s(self, now_s: float) -> float | None:
        return self._queue.next_action_age_s(now_s)

    @property
    def smoothness(self) -> SmoothnessTracker:
        return self._smoothness

    @property
    def last_merge(self) -> MergeFigures:
        return self._last_merge

    def count(self, name: str) -> int:
        return self._counts[name]
