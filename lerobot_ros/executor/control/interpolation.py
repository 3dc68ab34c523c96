"""Commands at the control rate from actions at the policy rate: linear interpolation in joint
space.

A policy trained at ``fps`` gives one action per 1/fps; a position controller
may want commands at ``control_rate_hz`` (>= fps). The control loop plays the
queue's rows on the policy's timeline: row k is due at t_k = k / fps (its
pop), and a tick at time t in [t_k, t_k+1) commands
``a_k + (t - t_k) * fps * (a_k+1 - a_k)``. Invariants:

* endpoints exact: a tick that lands on a row's time commands that row
  unchanged; with ``control_rate_hz == fps`` every tick is such a tick, so
  the commands are the rows, as without interpolation;
* rows are consumed (popped) at the policy rate, so the queue's depth, its
  playback time and RTC's action index keep counting policy steps;
* never extrapolate: with no following row queued, the playing row is held;
* a segment is as old as its older end: the staleness bound holds for every
  interpolated command (``Segment.age_s``);
* the safety envelope's step limit, given per policy step, is scaled to the
  control tick (``step_per_tick``), so the fastest allowed motion is the same
  at every control rate.

Plain Python; the executor core owns the one ``Playback`` and calls it under
its lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Phase closer than this to a row's time counts as on it (float noise of summing 1/ratio steps).
_ON_ROW = 1e-9


@dataclass(frozen=True)
class Row:
    """One queued action in robot space and when its source observation was taken (NaN:
    unknown)."""

    action: np.ndarray
    source_time_s: float


@dataclass(frozen=True)
class Position:
    """Where one control tick lands on the policy's timeline.

    ``new_row``: the tick reaches the next queued row's time (that row is
    popped if the tick executes); ``fraction``: how far past the playing row
    toward the following one, in [0, 1).
    """

    new_row: bool
    fraction: float


@dataclass(frozen=True)
class Segment:
    """What one tick commands: ``start`` (the playing row) toward ``end`` (the following one, if
    any)."""

    start: Row
    end: Row | None
    fraction: float

    def command(self) -> np.ndarray:
        start = np.asarray(self.start.action, dtype=np.float64)
        if self.end is None or self.fraction == 0.0:
            return start.copy()
        end = np.asarray(self.end.action, dtype=np.float64)
        return start + self.fraction * (end - start)

    def age_s(self, now_s: float) -> float | None:
        """The older end's age: None (stale) when either end that the command uses has an unknown
        source time."""
        times = [self.start.source_time_s]
        if self.end is not None and self.fraction > 0.0:
            times.append(self.end.source_time_s)
        if any(math.isnan(t) for t in times):
            return None
        return now_s - min(times)


def step_per_tick(max_step_per_policy_step: float, fps: float, control_rate_hz: float) -> float:
    """The envelope's step limit for one control tick (0 keeps meaning "no limit")."""
    return max_step_per_policy_step * fps / control_rate_hz


class Playback:
    """The control loop's place on the policy's timeline: the playing row and the phase past it."""

    def __init__(self, fps: float, control_rate_hz: float) -> None:
        for name, value in (("fps", fps), ("control_rate_hz", control_rate_hz)):
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number > 0, got {value}")
        if control_rate_hz < fps:
            raise ValueError(
                f"control_rate_hz must be >= fps (one command per policy action at least), "
                f"got control_rate_hz {control_rate_hz} < fps {fps}"
            )
        self.step = fps / control_rate_hz  # policy steps per control tick, in (0, 1]
        self._playing: Row | None = None
        self._phase = 0.0

    def next_position(self) -> Position:
        """Where the coming tick lands (nothing changes until ``played`` or ``stop``)."""
        if self._playing is None:
            return Position(True, 0.0)
        phase = self._phase + self.step
        if phase >= 1.0 - _ON_ROW:
            rest = phase - 1.0
            return Position(True, 0.0 if rest < _ON_ROW else rest)
        return Position(False, phase)

    def segment(
        self, position: Position, next_row: Row | None, row_after: Row | None
    ) -> Segment | None:
        """The segment the tick commands, from the queue's next two rows; None: nothing to play."""
        if position.new_row:
            return None if next_row is None else Segment(next_row, row_after, position.fraction)
        return Segment(self._playing, next_row, position.fraction)

    def played(self, segment: Segment) -> None:
        """The tick executed ``segment``: its start is now the playing row."""
        self._playing, self._phase = segment.start, segment.fraction

    def stop(self) -> None:
        """Nothing is playing (a fallback, a cleared queue, a reset): the next executed tick pops a
        row at once."""
        self._playing, self._phase = None, 0.0
