"""Windowed durations: the RTC delay and the server's inference figures follow recent samples, not
the worst ever seen."""

from __future__ import annotations

import math

import pytest

from lerobot_ros.executor.requests.latency import WindowedLatencyTracker, control_steps
from lerobot_ros.protocol.statistics import WindowedDurations
from lerobot_ros.protocol.telemetry import ServerStats


def test_empty_tracker_reports_zero():
    tracker = WindowedLatencyTracker()
    assert tracker.count == 0
    assert tracker.p50 == 0.0 and tracker.p95 == 0.0 and tracker.max == 0.0
    assert tracker.delay_steps(fps=30) == 0


def test_percentiles_and_max_over_the_samples():
    tracker = WindowedLatencyTracker(window=100)
    for ms in range(1, 101):  # 1 ms .. 100 ms
        tracker.add(ms / 1000)
    assert tracker.count == 100
    assert tracker.p50 == pytest.approx(0.0505)
    assert tracker.p95 == pytest.approx(0.09505)
    assert tracker.percentile(0) == pytest.approx(0.001)
    assert tracker.percentile(100) == pytest.approx(0.100)
    assert tracker.max == pytest.approx(0.100)


def test_a_warm_up_spike_leaves_the_window_after_window_samples():
    window = 10
    tracker = WindowedLatencyTracker(window=window)
    tracker.add(2.0)  # first inference: CUDA warm-up
    for _ in range(window - 1):
        tracker.add(0.05)
    assert tracker.max == 2.0
    assert tracker.delay_steps(fps=30, q=100) == 60
    tracker.add(0.05)  # the window-th sample after the spike pushes it out
    assert tracker.count == window
    assert tracker.max == pytest.approx(0.05)
    assert tracker.p95 == pytest.approx(0.05)
    assert tracker.delay_steps(fps=30) == 2  # ceil(0.05 * 30) = ceil(1.5)


def test_delay_steps_is_the_ceiling_of_latency_times_fps_without_float_noise():
    tracker = WindowedLatencyTracker(window=5)
    tracker.add(0.07)
    assert 0.07 * 100 > 7  # float noise the tracker must not turn into an 8th step
    assert tracker.delay_steps(fps=100) == 7
    tracker.clear()
    tracker.add(0.071)
    assert tracker.delay_steps(fps=100) == 8
    tracker.add(0.0)
    assert tracker.delay_steps(fps=30, q=0) == 0


@pytest.mark.parametrize("bad", [-0.001, math.nan, math.inf, -math.inf])
def test_impossible_latencies_are_refused(bad):
    tracker = WindowedLatencyTracker()
    with pytest.raises(ValueError, match="finite number of seconds >= 0"):
        tracker.add(bad)
    assert tracker.count == 0


def test_bad_arguments_say_what_was_expected():
    with pytest.raises(ValueError, match="window must be >= 1 sample, got 0"):
        WindowedLatencyTracker(window=0)
    tracker = WindowedLatencyTracker()
    with pytest.raises(ValueError, match=r"within \[0, 100\], got 101"):
        tracker.percentile(101)
    with pytest.raises(ValueError, match="fps must be a finite number > 0, got -1"):
        tracker.delay_steps(fps=-1)


def test_the_server_and_the_executor_share_one_windowed_statistic():
    assert issubclass(WindowedLatencyTracker, WindowedDurations)
    stats = ServerStats(window=3)
    for seconds in (2.0, 0.01, 0.02, 0.03):  # the warm-up spike leaves the window
        stats.record("ok", seconds, 0)
    assert stats.inference_percentiles_ms() == (pytest.approx(20.0), pytest.approx(29.0))
    with pytest.raises(ValueError, match="finite number of seconds >= 0"):
        WindowedDurations().add(-1.0)


def test_control_steps_round_up_without_float_noise():
    assert control_steps(0.07, 100) == 7 and control_steps(0.071, 100) == 8
    assert control_steps(0.0, 30) == 0
    with pytest.raises(ValueError, match="fps must be a finite number > 0, got 0"):
        control_steps(0.1, 0)
