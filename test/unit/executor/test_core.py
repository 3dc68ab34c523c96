"""The executor core's control tick, request cycle and readers (core.py), with a fake server
link."""

from __future__ import annotations

import pytest
from sensor_msgs.msg import Image

from lerobot_ros.executor.requests.request_cycle import request_due
from lerobot_ros.protocol.status import ExecutorState
from support.executor_harness import CAMERA, connected, counts, feed


def test_a_request_is_due_when_the_queue_covers_at_most_the_buffer_time():
    assert request_due(0.0, 0.5) and request_due(0.5, 0.5)
    assert not request_due(0.51, 0.5)


def test_control_tick_executes_in_order_then_holds_the_measured_position():
    clock, core, link, worker = connected()
    assert core.control_tick(clock()) is None, (
        "nothing measured, nothing commanded: nothing to hold"
    )
    feed(core, clock)
    # empty queue: hold, by name
    assert core.control_tick(clock()).tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert counts(core, clock).starvation_ticks == 2 and counts(core, clock).fallback_ticks == 2
    worker.step()
    assert [core.control_tick(clock())[0] for _ in range(3)] == [0.0, 1.0, 2.0]
    assert counts(core, clock).commands_published == 4 and core.state is ExecutorState.STREAMING


def test_stale_actions_are_never_executed():
    clock, core, link, worker = connected(max_action_age_s=0.3)
    feed(core, clock)
    worker.step()
    clock.t += 0.35
    action = core.control_tick(clock())
    assert action.tolist() == pytest.approx([0.1, 0.2, 0.3]), "stale: hold, not the queued action"
    assert counts(core, clock).queue_depth == 0 and core.state is ExecutorState.STALLED


def test_only_the_policy_cameras_are_sent_and_action_age_counts_from_the_oldest_sensor():
    clock, core, link, worker = connected(
        camera_names=[CAMERA, "observation.images.extra"], camera_topics=["/cam", "/extra"]
    )
    feed(core, clock)
    core.on_camera("observation.images.extra", Image(), clock())
    # fresher than the cameras
    core.on_joint_state(["c", "b", "a"], [0.3, 0.2, 0.1], [], clock() + 0.3)
    clock.t += 0.3
    assert worker.step()
    prepared = link.sent[-1]
    assert list(prepared.observation.cameras) == [CAMERA], (
        "the server refuses cameras its policy does not read"
    )
    assert prepared.observation.oldest_age_s == pytest.approx(0.3)
    # The first action's source is the 0.3 s old camera frame, not the send time.
    assert core.snapshot(clock()).next_action_age_s == pytest.approx(0.3)


def test_server_rejections_are_counted_apart_from_timeouts_and_their_reason_is_reported():
    clock, core, link, worker = connected()
    feed(core, clock)
    link.refusal = "episode 0 is over; the session is at episode 2"
    worker.step()
    worker.step()
    status = counts(core, clock)
    assert (status.request_rejections, status.request_timeouts) == (2, 0)
    assert (
        status.last_rejection_reason
        == "server answered status 1: episode 0 is over; the session is at episode 2"
    )
    assert core.state is ExecutorState.RECONNECTING
    assert status.reason.startswith(
        "2 failed requests in a row; the server refused the last: server answered"
    )


def test_telemetry_fills_every_status_field():
    from lerobot_ros.protocol.wire import control_plane

    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    telemetry = counts(core, clock)
    msg = control_plane.executor_status_to_msg(telemetry, _time())
    assert msg.state_name == "STREAMING" and msg.queue_depth == 10 and msg.requests_sent == 1
    assert (
        msg.latency_ms_p50 == pytest.approx(20.0)
        and msg.client_id == "arm"
        and msg.fallback == "hold"
    )
    diagnostic = control_plane.executor_diagnostic("x", telemetry)
    assert diagnostic.level == b"\x00" and {value.key for value in diagnostic.values} >= {
        "queue_depth",
        "state_name",
    }


def _time():
    from builtin_interfaces.msg import Time

    return Time(sec=1)
