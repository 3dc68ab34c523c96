"""The executor's timing parts without a ROS graph: interpolation between policy actions at a
control
rate above fps, the adaptive request threshold, the control loop's deadlines, sensors pulled from
the
middleware only when a request is built, and the worker woken by the control tick instead of
polling.
"""

from __future__ import annotations

import math
import threading
import time
import types

import numpy as np
import pytest
from sensor_msgs.msg import Image

from lerobot_ros.executor.control.control_loop import ControlLoop
from lerobot_ros.executor.control.interpolation import Playback, Row, Segment, step_per_tick
from lerobot_ros.executor.settings import ExecutorSettings, timing_warnings
from lerobot_ros.protocol.clocks import received_monotonic_s
from lerobot_ros.protocol.statistics import WindowedDurations
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.trigger import request_threshold_s
from lerobot_ros.protocol.wire import images
from support.executor_harness import CAMERA, connected, counts, feed, params, settings

HOLD = [0.1, 0.2, 0.3]  # what feed() measures, in joint order


def ticks(core, clock, count: int, dt: float) -> list:
    commands = []
    for _ in range(count):
        command = core.control_tick(clock())
        commands.append(None if command is None else command.tolist())
        clock.t += dt
    return commands


# ---------------------------------------------------------------- parameters


def test_control_rate_defaults_to_fps_and_may_not_be_below_it():
    assert (
        settings().command_rate_hz == 30.0
        and settings(control_rate_hz=200.0).command_rate_hz == 200.0
    )
    problems = ExecutorSettings.problems_of(params(fps=30.0, control_rate_hz=20.0))
    assert any("'control_rate_hz' 20 is below 'fps' 30" in p for p in problems), problems
    with pytest.raises(ValueError, match="control_rate_hz must be >= fps"):
        Playback(30.0, 20.0)


# ------------------------------------------------------------- interpolation


def test_interpolated_commands_hit_every_action_exactly_and_lie_on_the_line_between():
    clock, core, link, worker = connected(control_rate_hz=40.0)  # fps 10: four ticks per action
    feed(core, clock)
    assert worker.step()  # rows 0..9 (every joint equal to the row number)
    commands = ticks(core, clock, 40, 0.025)
    played = [c[0] for c in commands]
    assert played[:13] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0]
    assert all(played[4 * k] == float(k) for k in range(10)), (
        "a tick on an action's time commands it exactly"
    )
    assert played[37:40] == [9.0, 9.0, 9.0], (
        "no following action: the last one is held, never extrapolated"
    )
    assert all(c[0] == c[1] == c[2] for c in commands)
    telemetry = counts(core, clock)
    assert telemetry.commands_published == 40 and telemetry.starvation_ticks == 0
    assert telemetry.queue_depth == 0, (
        "rows are consumed at the policy rate: ten actions in 40 ticks"
    )
    assert core.control_tick(clock()).tolist() == pytest.approx(HOLD), (
        "then the queue is empty: fallback"
    )
    assert counts(core, clock).starvation_ticks == 1


def test_at_control_rate_equal_to_fps_the_commands_are_the_actions():
    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    assert [c[0] for c in ticks(core, clock, 10, 0.1)] == [float(k) for k in range(10)]


def test_max_step_is_scaled_to_the_control_tick():
    assert step_per_tick(0.5, 10.0, 40.0) == 0.125 and step_per_tick(0.0, 10.0, 40.0) == 0.0
    clock, core, link, worker = connected(control_rate_hz=40.0, max_step_per_tick=0.5)
    feed(core, clock)
    worker.step()
    commands = np.array(ticks(core, clock, 40, 0.025))
    steps = np.abs(np.diff(commands, axis=0))
    assert steps.max() <= 0.125 + 1e-12, "per action 0.5, so per quarter-action tick 0.125"
    assert counts(core, clock).safety_interventions > 0, "the actions move 1.0 per action: limited"


def test_a_segment_is_as_old_as_its_older_end():
    start, end = Row(np.zeros(3), 10.0), Row(np.ones(3), 11.0)
    assert Segment(start, end, 0.5).age_s(12.0) == 2.0
    assert Segment(end, start, 0.5).age_s(12.0) == 2.0
    assert Segment(end, start, 0.0).age_s(12.0) == 1.0, (
        "on the row's time only the row itself is used"
    )
    assert Segment(Row(np.zeros(3), math.nan), end, 0.5).age_s(12.0) is None, "unknown age: stale"
    assert Segment(start, end, 0.25).command().tolist() == [0.25, 0.25, 0.25]


def test_staleness_holds_inside_an_interpolated_segment():
    clock, core, link, worker = connected(control_rate_hz=40.0, max_action_age_s=0.31)
    feed(core, clock)
    worker.step()
    commands = ticks(core, clock, 14, 0.025)
    # Tick 12 is 0.300 s after the observation, tick 13 0.325 s: a quarter into the segment from
    # row 3 to 4.
    assert [c[0] for c in commands[:13]] == [k / 4 for k in range(13)]
    assert commands[13] == pytest.approx(HOLD), (
        "stale mid-segment: the fallback, not the interpolated point"
    )
    assert core.state is ExecutorState.STALLED and counts(core, clock).queue_depth == 0


# ---------------------------------------------------------- request threshold


def test_threshold_rises_with_latency_is_floored_by_the_buffer_and_bounded_by_the_chunk():
    assert request_threshold_s(0.5, 0.02, 1.5, 30.0, 50) == 0.5
    assert request_threshold_s(0.5, 0.4, 1.5, 30.0, 50) == pytest.approx(0.4 * 1.5 + 1 / 30)
    assert request_threshold_s(0.5, 5.0, 1.5, 30.0, 50) == pytest.approx(50 / 30), (
        "capped at one chunk"
    )
    assert request_threshold_s(0.5, 5.0, 1.5, 30.0, 50, replace_mode=True) == pytest.approx(
        50 / 30
    )
    assert request_threshold_s(2.0, 5.0, 1.5, 30.0, 50) == 2.0, (
        "the operator's buffer is a floor, never cut"
    )
    assert request_threshold_s(0.5, 5.0, 1.5, 30.0, 0) == pytest.approx(7.5 + 1 / 30), (
        "no chunk known yet"
    )
    # Append mode: a chunk asked for with T queued ends T + 1.67 s after its observation.
    assert request_threshold_s(0.5, 5.0, 1.5, 30.0, 50, max_action_age_s=2.5) == pytest.approx(
        2.5 - 50 / 30
    )
    assert request_threshold_s(
        0.5, 5.0, 1.5, 30.0, 50, max_action_age_s=2.5, replace_mode=True
    ) == pytest.approx(50 / 30)
    assert request_threshold_s(0.5, 5.0, 1.5, 30.0, 50, max_action_age_s=1.8) == 0.5, (
        "never below the buffer"
    )
    with pytest.raises(ValueError, match="margin must be a finite number > 0, got 0"):
        request_threshold_s(0.5, 0.1, 0.0, 30.0, 50)


def test_threshold_falls_back_when_the_window_forgets_slow_round_trips():
    window = WindowedDurations(window=20)
    for _ in range(20):
        window.add(0.6)
    slow = request_threshold_s(0.5, window.percentile(95), 1.5, 30.0, 50)
    for _ in range(20):
        window.add(0.03)
    assert slow == pytest.approx(0.6 * 1.5 + 1 / 30)
    assert request_threshold_s(0.5, window.percentile(95), 1.5, 30.0, 50) == 0.5


def test_the_core_requests_earlier_when_the_round_trip_grows_and_reports_the_threshold():
    clock, core, link, worker = connected()  # fps 10, buffer 0.25, chunk of 10 (1 s)
    assert core.request_threshold_s == 0.25
    link.latency_s = 0.4
    feed(core, clock)
    assert worker.step()
    threshold = counts(core, clock).request_threshold_s
    assert threshold == pytest.approx(0.4 * 1.5 + 0.1) == core.request_threshold_s
    ticks(core, clock, 3, 0.1)  # 7 rows left: 0.7 s <= 0.7 s
    assert core.request_due(clock()), "due at the threshold, well above buffer_time_s 0.25"
    assert timing_warnings(core.settings, 10, threshold_s=threshold) == []
    warned = timing_warnings(settings(fps=10.0, max_action_age_s=1.5), 10, threshold_s=threshold)
    assert any("0.700 + 1.000 s" in w for w in warned), warned


# -------------------------------------------------------------- control loop


def test_deadlines_are_absolute_and_whole_missed_periods_are_skipped():
    loop = ControlLoop(100.0, lambda now: None)
    assert loop.next_deadline(1.0, 1.005) == pytest.approx(1.01), (
        "late by less than a period: no skip"
    )
    assert loop.skipped == 0
    # 1.01 and 1.02 are a whole period past: skipped; 1.03 is less than one late: it runs at once.
    assert loop.next_deadline(1.0, 1.0351) == pytest.approx(1.03) and loop.skipped == 2
    with pytest.raises(ValueError, match="rate_hz must be a finite number > 0"):
        ControlLoop(0.0, lambda now: None)


def test_the_loop_ticks_on_its_own_thread_survives_a_failed_tick_and_stops_promptly():
    seen, errors = [], []

    def tick(now):
        seen.append((threading.current_thread().name, now))
        if len(seen) == 2:
            raise RuntimeError("one bad tick")

    loop = ControlLoop(200.0, tick, on_error=errors.append)
    loop.start()
    deadline = time.monotonic() + 10
    while len(seen) < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    loop.stop()
    loop.join(2.0)
    assert not loop.is_alive() and time.monotonic() - started < 1.0
    assert len(seen) >= 5 and {name for name, _ in seen} == {"lerobot_ros_control_loop"}
    assert [repr(e) for e in errors] == ["RuntimeError('one bad tick')"]
    times = [now for _, now in seen]
    assert times == sorted(times)


def test_a_wake_ticks_at_once_on_the_loops_thread_and_leaves_the_schedule_alone():
    seen = []
    loop = ControlLoop(
        1.0, lambda now: seen.append((threading.current_thread().name, now)), name="status"
    )
    started = time.monotonic()
    loop.start()
    try:
        time.sleep(0.3)
        woken = time.monotonic()
        loop.wake()
        deadline = woken + 5
        while len(seen) < 2 and time.monotonic() < deadline:
            time.sleep(0.002)
        assert [name for name, _ in seen] == ["status", "status"]
        assert seen[0][1] - woken < 0.2, "the woken tick waited for its period (1 s)"
        # The scheduled tick still comes one period after the start, not one period after the wake.
        assert started + 0.9 < seen[1][1] < woken + 0.9
    finally:
        loop.stop()
        loop.join(2.0)
    assert not loop.is_alive()


# ---------------------------------------------------------- lazy camera frames


class Middleware:
    """A keep-last-1 subscription as the executor reads it: the newest sample waits until taken
    once."""

    def __init__(self) -> None:
        self.waiting = None
        self.takes = 0

    def publish(self, value, received_s: float) -> None:
        self.waiting = (value, received_s)

    def take(self):
        self.takes += 1
        newest, self.waiting = self.waiting, None
        return newest


def joint_state(positions, names=("c", "b", "a")):
    return types.SimpleNamespace(name=list(names), position=list(positions), velocity=[])


def test_pulled_sensors_are_taken_only_when_a_request_is_built_and_the_newest_is_sent():
    clock, core, link, worker = connected()
    joints, camera = Middleware(), Middleware()
    core.pull_sensors(joint_state=joints.take, cameras={CAMERA: camera.take})
    frames = [images.rgb_to_raw(np.full((8, 8, 3), k, np.uint8)) for k in range(4)]
    for k, frame in enumerate(frames):  # the drivers publish four times before anything reads
        joints.publish(joint_state([0.3, 0.2, k]), clock())
        camera.publish(frame, clock())
    assert joints.takes == camera.takes == 0
    assert worker.step()
    assert camera.takes == 1 and joints.takes == 1, "one take per source per request"
    sent = link.sent[-1].observation
    assert bytes(sent.cameras[CAMERA].data) == bytes(frames[3].data)
    assert list(sent.state) == pytest.approx([3.0, 0.2, 0.3]), (
        "the newest joint state, mapped by name"
    )
    camera.publish(frames[0], clock())
    ticks(core, clock, 3, 0.05)  # queued rows cover these ticks: no request is due
    assert camera.takes == 1, "control ticks never take a frame"


def test_a_pulled_sample_is_as_old_as_its_reception_not_its_take():
    clock, core, link, worker = connected(max_observation_age_s=0.5)
    joints, camera = Middleware(), Middleware()
    core.pull_sensors(joint_state=joints.take, cameras={CAMERA: camera.take})
    joints.publish(joint_state([0.3, 0.2, 0.1]), clock())
    camera.publish(Image(), clock() - 2.0)  # received 2 s ago, never taken until now
    assert not worker.step() and not link.sent
    assert "older than max_observation_age_s 0.5: camera" in core.snapshot(clock()).last_problem


def test_a_source_that_stops_keeps_its_last_sample_which_then_goes_stale():
    clock, core, link, worker = connected(max_observation_age_s=0.5)
    joints, camera = Middleware(), Middleware()
    core.pull_sensors(joint_state=joints.take, cameras={CAMERA: camera.take})
    joints.publish(joint_state([0.3, 0.2, 0.1]), clock())
    camera.publish(Image(), clock())
    assert worker.request_once() and len(link.sent) == 1
    clock.t += 1.0  # the camera driver died: nothing new to take; the joints still publish
    joints.publish(joint_state([0.3, 0.2, 0.1]), clock())
    assert not worker.request_once() and len(link.sent) == 1
    assert "camera 'observation.images.front' 1.000 s" in core.snapshot(clock()).last_problem


def test_a_joint_state_that_cannot_be_mapped_is_refused_and_the_last_good_one_kept():
    clock, core, link, worker = connected()
    joints = Middleware()
    core.pull_sensors(joint_state=joints.take)
    joints.publish(joint_state([0.3, 0.2, 0.1]), clock())
    assert list(core._sensors.measured_positions()) == [0.1, 0.2, 0.3]
    joints.publish(joint_state([1.0, 2.0], names=("a", "b")), clock())
    assert list(core._sensors.measured_positions()) == [0.1, 0.2, 0.3]
    assert "lacks joints ['c']" in core._sensors.last_joint_state_error


def test_a_frame_the_middleware_cannot_deserialize_is_not_sent_and_the_next_one_is():
    clock, core, link, worker = connected()
    joints, camera = Middleware(), Middleware()
    core.pull_sensors(joint_state=joints.take, cameras={CAMERA: camera.take})
    joints.publish(joint_state([0.3, 0.2, 0.1]), clock())

    def corrupt():
        raise RuntimeError("truncated CDR")

    core.pull_sensors(cameras={CAMERA: corrupt})
    assert not worker.request_once() and not link.sent
    assert (
        "camera 'observation.images.front''s frame could not be read: RuntimeError: truncated CDR"
        in core.snapshot(clock()).last_problem
    )
    core.pull_sensors(cameras={CAMERA: camera.take})
    camera.publish(Image(), clock())
    assert worker.request_once() and len(link.sent) == 1


def test_pulling_an_unknown_camera_is_refused_naming_the_known_ones():
    clock, core, link, worker = connected()
    with pytest.raises(ValueError, match=r"no such cameras \['wrist'\]; this robot's cameras are"):
        core.pull_sensors(cameras={"wrist": Middleware().take})


def test_the_receive_time_comes_from_the_middleware_stamps_on_the_monotonic_clock():
    wall_now, mono_now = 1_000_000_000_000, 50.0
    assert received_monotonic_s(
        {"received_timestamp": wall_now - 250_000_000}, wall_now, mono_now
    ) == pytest.approx(49.75)
    # An RMW without a reception stamp is read by the publisher's stamp.
    assert received_monotonic_s(
        {"received_timestamp": 0, "source_timestamp": wall_now - 10**9}, wall_now, mono_now
    ) == pytest.approx(49.0)
    assert received_monotonic_s({}, wall_now, mono_now) == mono_now
    assert (
        received_monotonic_s({"received_timestamp": wall_now + 10**9}, wall_now, mono_now)
        == mono_now
    )


# ------------------------------------------------------ the worker is woken


def test_the_idle_worker_sleeps_until_the_control_tick_says_a_request_is_due():
    clock, core, link, worker = connected()
    feed(core, clock)
    assert worker.step()  # ten rows: 1 s, threshold 0.25 s
    worker.idle_s = 60.0  # only the control tick's wake-up can end its wait in time
    worker.start()
    try:
        time.sleep(0.2)
        assert len(link.sent) == 1, "nothing due: the worker sleeps"
        for _ in range(8):
            clock.t += 0.1
            feed(core, clock)
            core.control_tick(clock())  # the eighth leaves 0.2 s queued
        deadline = time.monotonic() + 10
        while len(link.sent) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(link.sent) == 2, "the tick that crossed the threshold woke the worker"
    finally:
        worker.stop()
        worker.join(2.0)
    assert not worker.is_alive()
