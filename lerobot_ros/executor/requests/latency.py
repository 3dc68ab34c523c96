"""Round-trip latency in control steps, for RTC delay estimation and telemetry.

Invariant: the delay estimate follows the recent latency (the window of
``statistics.WindowedDurations``), and a latency converts to control steps
as ceil(latency * fps) without float noise adding a whole step.
"""

from __future__ import annotations

import math

from lerobot_ros.protocol.statistics import WindowedDurations


def control_steps(seconds: float, fps: float) -> int:
    """Control steps the robot advances in ``seconds``: ceil(seconds * fps), at least 0."""
    if not (math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a finite number > 0, got {fps}")
    # The tolerance keeps float noise from adding a whole step
    # (0.07 s * 100 fps is 7.000000000000001, which must give 7, not 8).
    return max(0, math.ceil(seconds * fps - 1e-9))


class WindowedLatencyTracker(WindowedDurations):
    """Round-trip latencies of the last ``window`` requests (seconds).

    The network worker adds, the control loop and the status thread read.
    """

    def delay_steps(self, fps: float, q: float = 95.0) -> int:
        """Control steps the robot advances during one round trip: ceil(p_q * fps)."""
        return control_steps(self.percentile(q), fps)
