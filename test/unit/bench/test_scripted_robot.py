"""The scripted robot numbers, builds and merges requests as the executor does; no server."""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from sensor_msgs.msg import Image

from bench.scripted_robot import (
    ScriptedRequests,
    ScriptedRobot,
    every,
    message_of,
    plain_request,
)
from lerobot_ros.executor.control.action_queue import ActionQueue
from lerobot_ros.executor.requests.answer_rules import Answer
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.protocol.contract import CameraSpec
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import RequestId, observation_to_msg
from support.executor_harness import CAMERA, CAPABILITIES, chunk, connected, feed

RTC_CAPABILITIES = dataclasses.replace(
    CAPABILITIES,
    rtc_supported=True,
    rtc_enabled=True,
    rtc_execution_horizon=4,
    cameras=(CameraSpec(CAMERA, 8, 8),),
)


def grant(session_id="s1", rtc=False, capabilities=None) -> SessionGrant:
    capabilities = capabilities or (RTC_CAPABILITIES if rtc else CAPABILITIES)
    return SessionGrant(session_id, rtc, "/obs", "/chunk", capabilities)


def frame():
    return images.rgb_to_compressed(np.full((8, 8, 3), 90, np.uint8), 90)


def rows(start: int, count: int = 10) -> np.ndarray:
    """A chunk whose row i is (start + i) in every column: rows tell where they came from."""
    return np.tile(np.arange(start, start + count, dtype=np.float32)[:, None], (1, 3))


def answered(requests: ScriptedRequests, pending, actions, latency_s: float = 0.05):
    received = pending.request.sent_monotonic_ns + round(latency_s * 1e9)
    return requests.merge(pending, chunk(pending.request, actions=actions), received)


def test_requests_are_numbered_from_one_with_the_sessions_ids_and_task():
    requests = ScriptedRequests("arm", fps=10.0, task="pick")
    with pytest.raises(RuntimeError, match="no session"):
        requests.numbered(np.zeros(3), {CAMERA: frame()})
    requests.opened(grant("s1"))
    first = requests.numbered(np.zeros(3), {CAMERA: frame()}, now_ns=5)
    second = requests.numbered(np.ones(3), {CAMERA: frame()}, now_ns=6)
    assert first.request == RequestId("s1", "arm", 1, 0, 0, 5)
    assert second.request == RequestId("s1", "arm", 2, 0, 0, 6)
    assert (second.task, second.jpeg_quality, second.rtc, second.inference_delay_steps) == (
        "pick",
        90,
        False,
        0,
    )
    # a re-opened session is a new epoch; the numbering goes on
    requests.opened(grant("s2"))
    third = requests.numbered(np.zeros(3), {CAMERA: frame()}, now_ns=7)
    assert third.request == RequestId("s2", "arm", 3, 0, 1, 7)


def test_only_the_policys_cameras_go_resized_to_its_size():
    requests = ScriptedRequests("arm")
    requests.opened(grant())
    big = images.rgb_to_raw(np.zeros((16, 16, 3), np.uint8))
    pending = requests.numbered(np.zeros(3), {CAMERA: big, "observation.images.wrist": big})
    assert set(pending.observation.cameras) == {CAMERA}
    assert pending.camera_sizes == {CAMERA: (8, 8)}
    msg = message_of(pending)
    assert list(msg.compressed_camera_names) == [CAMERA] and not msg.raw_camera_names
    assert images.CompressedFrame.of(msg.compressed_images[0]).to_rgb().shape == (8, 8, 3)
    # resize_to_policy off: a frame goes as it is
    unresized = ScriptedRequests("arm", resize_to_policy=False)
    unresized.opened(grant())
    assert unresized.numbered(np.zeros(3), {CAMERA: big}).camera_sizes is None


def test_message_is_the_pending_requests_outgoing_observation():
    requests = ScriptedRequests("arm", task="pick")
    requests.opened(grant())
    pending = requests.numbered(np.arange(3), {CAMERA: frame()}, now_ns=9)
    assert message_of(pending) == observation_to_msg(pending.outgoing())


def test_rtc_prefix_is_the_queues_left_over_after_the_rows_played():
    requests = ScriptedRequests(
        "arm", fps=10.0, queue=ActionQueue(rtc_enabled=True), delay_steps=2
    )
    requests.opened(grant(rtc=True))
    first = requests.numbered(np.zeros(3), {CAMERA: frame()}, now_ns=10**9)
    assert first.rtc and first.inference_delay_steps == 2
    assert first.snapshot.left_over_model is None  # nothing merged yet: no prefix
    assert first.outgoing().prefix_model is None
    # nothing was played while the request was out: nothing is trimmed
    assert answered(requests, first, rows(100)) == 0
    assert requests.play(2) == 2  # the robot plays two rows before it asks again
    second = requests.numbered(np.zeros(3), {CAMERA: frame()}, now_ns=2 * 10**9)
    # capped to the RTC horizon, from the read index on
    np.testing.assert_array_equal(second.snapshot.left_over_model, rows(102, 4))
    np.testing.assert_array_equal(second.outgoing().prefix_model, rows(102, 4))
    assert second.snapshot.action_index == 2
    # three rows played during a 0.25 s round trip (3 control steps at 10 Hz): the new chunk
    # replaces the queue minus those three rows
    assert requests.play(3) == 3
    assert answered(requests, second, rows(200), latency_s=0.25) == 3
    assert requests.last_delay_steps == 3
    np.testing.assert_array_equal(requests.queue.get_left_over(), rows(203, 7))


def test_trim_is_clamped_to_the_rows_played_as_the_executor_clamps_it():
    requests = ScriptedRequests("arm", fps=10.0, queue=ActionQueue(rtc_enabled=True))
    requests.opened(grant(rtc=True))
    first = requests.numbered(np.zeros(3), {CAMERA: frame()})
    answered(requests, first, rows(0))
    second = requests.numbered(np.zeros(3), {CAMERA: frame()})
    # a 0.5 s round trip is 5 steps, but the robot played only one row meanwhile
    requests.play(1)
    assert answered(requests, second, rows(50), latency_s=0.5) == 1


def test_delay_follows_the_windowed_p95_round_trip_without_a_fixed_one():
    requests = ScriptedRequests("arm", fps=10.0)
    requests.opened(grant(rtc=True))
    for latency_s in (0.1, 0.2, 0.3):
        pending = requests.numbered(np.zeros(3), {CAMERA: frame()})
        assert answered(requests, pending, rows(0), latency_s) is None  # no queue: no merge
    assert requests.numbered(np.zeros(3), {CAMERA: frame()}).inference_delay_steps == 3
    # without RTC granted the delay is 0 whatever the latency
    requests.opened(grant("s2", rtc=False))
    assert requests.numbered(np.zeros(3), {CAMERA: frame()}).inference_delay_steps == 0


def test_numbering_and_merging_match_the_executor_cores():
    clock, core, _, _ = connected()
    feed(core, clock)
    script = ScriptedRequests("arm", fps=10.0, queue=ActionQueue(rtc_enabled=False))
    script.opened(grant(core.identity.session_id))
    state = np.array([0.1, 0.2, 0.3], np.float32)
    for round_index in range(2):
        ours = core.start_request(clock(), clock.ns())
        mine = script.numbered(state, {CAMERA: Image()}, now_ns=clock.ns())
        assert mine.request == ours.request
        np.testing.assert_array_equal(mine.observation.state, ours.observation.state)
        assert set(mine.observation.cameras) == set(ours.observation.cameras)
        for name in ("inference_delay_steps", "rtc", "task", "jpeg_quality", "camera_sizes"):
            assert getattr(mine, name) == getattr(ours, name), name
        assert mine.snapshot.action_index == ours.snapshot.action_index
        for side in ("left_over_model", "left_over_robot"):
            a, b = getattr(mine.snapshot, side), getattr(ours.snapshot, side)
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a, b)
        actions = rows(10 * round_index)
        received = ours.request.sent_monotonic_ns + 20_000_000
        assert core.merge(ours, chunk(ours.request, actions=actions), received, clock())
        script.merge(mine, chunk(mine.request, actions=actions), received)
        clock.t += 0.1
    np.testing.assert_array_equal(
        core.queued_actions().left_over_robot, script.queue.get_processed_left_over()
    )


def test_plain_request_sends_what_a_test_names():
    request = RequestId("s1", "arm", 7, 2, 0, 123)
    prefix = np.ones((4, 3), np.float32)
    pending = plain_request(
        request, [1, 2, 3], {CAMERA: frame()}, inference_delay_steps=3, prefix=(prefix, prefix * 2)
    )
    msg = message_of(pending)
    assert (msg.seq, msg.episode, msg.inference_delay_steps) == (7, 2, 3)
    outgoing = pending.outgoing()
    np.testing.assert_array_equal(outgoing.prefix_robot, prefix * 2)
    # no prefix: RTC off, the delay still sent as given
    bare = plain_request(request, [1, 2, 3], {CAMERA: frame()}, inference_delay_steps=2)
    assert bare.outgoing().prefix_model is None and bare.outgoing().inference_delay_steps == 2


class FakeSession:
    """A server that answers each observation with a chunk of its seq, 50 ms later."""

    def __init__(self, capabilities=CAPABILITIES, rtc=False, refuse=()) -> None:
        self.capabilities, self.rtc, self.refuse = capabilities, rtc, set(refuse)
        self.sent = []

    def open_session(self, request, timeout_s):
        self.opened_with = request
        return grant("s1", self.rtc, self.capabilities)

    def request_chunk(self, request, msg, timeout_s):
        self.sent.append(msg)
        if request.seq in self.refuse:
            return Answer(None, 0, False, refusal="busy")
        received = request.sent_monotonic_ns + 50_000_000
        return Answer(chunk(request, actions=rows(100 * request.seq)), received, False, request)

    def close_session(self, session_id, timeout_s):
        self.closed = session_id

    def destroy(self):
        self.destroyed = True


def test_scripted_robot_opens_requests_and_merges_through_its_session():
    session = FakeSession(RTC_CAPABILITIES, rtc=True)
    robot = ScriptedRobot(
        None,
        "",
        "arm",
        state=lambda seq: np.full(3, seq, np.float32),
        cameras={CAMERA: frame()},
        action_names=("a", "b", "c"),
        fps=10.0,
        task="pick",
        rtc=True,
        delay_steps=1,
        plays=lambda queued: 2,
        session=session,
    )
    robot.open()
    assert session.opened_with.rtc_requested and session.opened_with.camera_names == (CAMERA,)
    assert robot.queue.rtc_enabled  # the merge mode follows the grant
    first, second = robot.request(), robot.request()
    assert [m.seq for m in session.sent] == [1, 2]
    assert list(session.sent[1].state) == [2.0, 2.0, 2.0]
    assert first.message is session.sent[0] and first.round_trip_s == pytest.approx(0.05)
    assert first.encode_s >= 0 and second.merged_ns > 0 and second.trimmed == 0
    # the second request's prefix: the first chunk after the two rows played, to the horizon
    np.testing.assert_array_equal(second.pending.outgoing().prefix_model, rows(102, 4))
    robot.close()
    assert session.closed == "s1" and session.destroyed


def test_send_loop_keeps_answers_and_failures_until_stopped():
    session = FakeSession(refuse={2})
    robot = ScriptedRobot(
        None, "", "arm", np.zeros(3), {CAMERA: frame()}, ("a", "b", "c"), session=session
    )
    robot.open()
    stop = threading.Event()
    seen = []

    def answer(exchange):
        seen.append(exchange.request.seq)
        if len(seen) == 3:
            stop.set()

    robot.send_loop(stop, on_exchange=answer)
    assert seen == [1, 3, 4]
    assert [why for _, why in robot.failures] == ["busy"]


def test_every_keeps_a_grid_and_sends_a_late_request_at_once(monkeypatch):
    now = [10.0]
    monkeypatch.setattr("bench.scripted_robot.time.monotonic", lambda: now[0])
    due = every(0.5)
    assert due() == 10.0
    now[0] = 10.1
    assert due() == 10.5  # on time: waits for the grid
    now[0] = 11.2  # late: leaves at once, the grid stays
    assert due() == 11.0
    assert due() == 11.5
