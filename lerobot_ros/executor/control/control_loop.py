"""The control loop: one thread of its own that calls the tick at absolute deadlines.

Invariants:

* deadlines are absolute: tick k is due at ``start + k * period``, so a late
  tick never shifts the ones after it (no drift from sleeping one period
  after each tick's work);
* a tick less than one period late runs at once; whole periods missed (the
  process was descheduled) are skipped and counted, never made up in a
  burst of commands, as rcl timers do;
* the loop waits on nothing but the clock: no rclpy executor, wait set or
  callback group, so sensor, service, heartbeat and chunk callbacks (on the
  executor's thread) and the network worker (its own thread) never queue
  in front of a tick; what it shares with them is the core's lock, held for
  microseconds, and the GIL;
* ``stop`` ends the wait at once, and an exception in one tick is reported
  and does not end the loop (the fail-safe decides every next tick afresh);
* ``wake`` runs one extra tick at once, on the loop's own thread, and leaves
  the deadlines as they were (the status loop publishes a goal's start and
  end this way: on one thread, so statuses never go out of order).

The executor also publishes its status on one of these (``name`` tells them
apart): a thread on the clock costs nothing between periods, where a timer
on the node's MultiThreadedExecutor woke its Python loop several times a
period (the cost is in docs/reference/benchmarks.md).

Plain Python: the clock and the wait are injectable for tests.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable


class ControlLoop(threading.Thread):
    """Calls ``tick(now_s)`` at ``rate_hz`` on its own thread until ``stop``."""

    def __init__(
        self,
        rate_hz: float,
        tick: Callable[[float], None],
        on_error: Callable[[BaseException], None] = lambda error: None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "lerobot_ros_control_loop",
    ) -> None:
        if not (math.isfinite(rate_hz) and rate_hz > 0):
            raise ValueError(f"rate_hz must be a finite number > 0, got {rate_hz}")
        super().__init__(name=name, daemon=True)
        self.period_s = 1.0 / rate_hz
        self._tick, self._on_error, self._clock = tick, on_error, clock
        self._alarm = threading.Event()  # set by stop and by wake: ends the wait at once
        self._stopping = False
        self._woken = False
        self.skipped = 0  # deadlines missed by a whole period or more, not made up

    def stop(self) -> None:
        self._stopping = True
        self._alarm.set()

    def wake(self) -> None:
        """Tick once more at once (the scheduled ticks stay where they are)."""
        self._woken = True
        self._alarm.set()

    def run(self) -> None:
        deadline = self._clock() + self.period_s
        while not self._stopping:
            delay = deadline - self._clock()
            if delay > 0 and self._alarm.wait(delay):
                self._alarm.clear()
                if self._stopping:
                    return
            if self._woken:
                self._woken = False
                self._run_tick()
                if self._clock() < deadline:
                    continue
            self._run_tick()
            deadline = self.next_deadline(deadline, self._clock())

    def _run_tick(self) -> None:
        try:
            self._tick(self._clock())
        except Exception as error:  # noqa: BLE001 - reported; the next tick decides afresh
            self._on_error(error)

    def next_deadline(self, deadline: float, now: float) -> float:
        """The deadline after ``deadline``, skipping (and counting) those already a whole period
        past."""
        following = deadline + self.period_s
        missed = math.floor((now - following) / self.period_s)
        if missed > 0:
            self.skipped += missed
            following += missed * self.period_s
        return following
