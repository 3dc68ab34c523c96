"""Durations over a recent window: percentiles and maximum of the last N samples.

Invariant: every statistic, ``max`` included, covers only the last ``window``
samples, so one warm-up spike (first CUDA kernels, a cold cache) leaves the
figures after ``window`` more samples instead of inflating them forever, as an
all-time maximum (LeRobot's ``LatencyTracker``) would. Used by the executor
(round-trip latency, RTC delay) and the server (inference duration).
"""

from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np


class WindowedDurations:
    """Durations (seconds) of the last ``window`` events.

    Thread-safe: one thread adds (a worker), another reads (a status timer).
    """

    def __init__(self, window: int = 50) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1 sample, got {window}")
        self._window = int(window)
        self._samples: deque[float] = deque(maxlen=self._window)
        self._lock = threading.Lock()

    @property
    def window(self) -> int:
        return self._window

    def add(self, seconds: float) -> None:
        """Record one duration; it must be finite and >= 0 seconds."""
        value = float(seconds)
        # A negative or non-finite duration is a clock bug upstream: refuse it
        # loudly rather than letting it bend every statistic.
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"duration must be a finite number of seconds >= 0, got {seconds!r}")
        with self._lock:
            self._samples.append(value)

    def clear(self) -> None:
        with self._lock:
            self._samples.clear()

    @property
    def count(self) -> int:
        """Samples currently in the window (at most ``window``)."""
        with self._lock:
            return len(self._samples)

    def percentile(self, q: float) -> float:
        """The q-th percentile (q in [0, 100]) of the window in seconds; 0.0 when empty."""
        if not (0.0 <= q <= 100.0):
            raise ValueError(f"percentile q must be within [0, 100], got {q}")
        with self._lock:
            if not self._samples:
                return 0.0
            values = np.fromiter(self._samples, dtype=np.float64, count=len(self._samples))
        return float(np.percentile(values, q))

    @property
    def p50(self) -> float:
        return self.percentile(50.0)

    @property
    def p95(self) -> float:
        return self.percentile(95.0)

    @property
    def max(self) -> float:
        """Largest duration in the window (not all time); 0.0 when empty."""
        with self._lock:
            return max(self._samples, default=0.0)
