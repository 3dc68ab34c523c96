"""Round-trip latency over a recent window, for RTC delay estimation and telemetry.

Invariant: the delay estimate follows the recent latency. One warm-up spike
(first CUDA kernels, a cold cache) must not inflate the estimate forever —
LeRobot's ``LatencyTracker`` keeps an all-time maximum, which makes every later
RTC merge trim (and the robot skip) more steps than the real delay. Here every
statistic, ``max`` included, covers only the last ``window`` samples.
"""

from __future__ import annotations

import math
import threading
from collections import deque

import numpy as np


class WindowedLatencyTracker:
    """Latency samples (seconds) of the last ``window`` requests.

    Thread-safe: the network worker adds, the status timer reads.
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
        """Record one round-trip latency; it must be finite and >= 0 seconds."""
        value = float(seconds)
        # A negative or non-finite latency is a clock bug upstream: refuse it
        # loudly rather than letting it bend the delay estimate.
        if not math.isfinite(value) or value < 0.0:
            raise ValueError(f"latency must be a finite number of seconds >= 0, got {seconds!r}")
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
        """Largest latency in the window (not all time); 0.0 when empty."""
        with self._lock:
            return max(self._samples, default=0.0)

    def delay_steps(self, fps: float, q: float = 95.0) -> int:
        """Control steps the robot advances during one round trip: ceil(p_q * fps)."""
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be a finite number > 0, got {fps}")
        # The tolerance keeps float noise from adding a whole step
        # (0.07 s * 100 fps is 7.000000000000001, which must give 7, not 8).
        return max(0, math.ceil(self.percentile(q) * fps - 1e-9))
