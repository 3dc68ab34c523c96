"""The executor's plain logic without a ROS graph: observation assembly, chunk
acceptance, command messages, the request trigger, parameters, the core tick
and the network worker's one-request-in-flight cycle (with a fake server link).
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from lerobot_ros.wire import images
from lerobot_ros.contract import ServerCapabilities
from lerobot_ros.wire.data_plane import RequestId
from lerobot_ros.executor.chunks import InFlight, rejection
from lerobot_ros.executor.core import request_due
from lerobot_ros.executor.observation import (
    JointStateError,
    NotSent,
    ObservationAssembler,
    map_joint_state,
    to_message,
)
from lerobot_ros.executor.settings import ExecutorSettings, default_client_id, timing_warnings
from lerobot_ros.executor.state_machine import ExecutorState
from lerobot_ros.wire.output_modes import output_mode
from support.executor_harness import (
    CAMERA,
    CAPABILITIES,
    JOINTS,
    MODEL,
    chunk,
    connected,
    counts,
    feed,
    params,
    settings,
)

# ---------------------------------------------------------------- parameters


def test_default_parameters_with_joints_and_a_camera_are_valid():
    assert ExecutorSettings.problems_of(params()) == []
    made = settings()
    assert made.camera_transports == ("raw",)
    assert made.output_topic == "/forward_position_controller/commands"
    assert settings(output_mode="joint_trajectory").output_topic == "/joint_trajectory_controller/joint_trajectory"
    assert settings(output_mode="joint_state", output_topic="/x").output_topic == "/x"
    assert made.state_dim == 3 and settings(state_include_velocity=True).state_dim == 6


def test_every_parameter_problem_is_reported_at_once():
    problems = ExecutorSettings.problems_of(params(
        joint_names=[""], fps=0.0, camera_topics=["/a", "/b"], camera_transports=["h264"], output_mode="servo",
        fallback="brake", jpeg_quality=101, buffer_time_s=-1.0, client_id="bad-id", server_namespace="lerobot",
        max_step_per_tick=-0.1,
    ))
    text = "\n".join(problems)
    for expected in ("'joint_names' is empty", "'fps' is 0.0", "'camera_topics' holds 2 topics for 1 cameras",
                     "'camera_transports' has ['h264']", "'output_mode' is 'servo'", "'fallback' is 'brake'",
                     "'jpeg_quality' is 101", "'buffer_time_s' is -1.0", "'client_id'", "'server_namespace'",
                     "'max_step_per_tick' is -0.1"):
        assert expected in text, (expected, problems)


def test_limit_lists_must_match_the_joints_and_not_cross():
    problems = ExecutorSettings.problems_of(params(joint_lower_limits=[0.0, 1.0], joint_upper_limits=[1.0, 0.0, 1.0]))
    assert any("'joint_lower_limits' holds 2 values, expected none or 3" in p for p in problems)
    problems = ExecutorSettings.problems_of(params(joint_lower_limits=[0.0, 2.0, 0.0], joint_upper_limits=[1.0, 1.0, 1.0]))
    assert any("above 'joint_upper_limits' for ['b']" in p for p in problems)
    problems = ExecutorSettings.problems_of(params(reconnect_backoff_initial_s=9.0, reconnect_backoff_max_s=1.0))
    assert any("reconnect_backoff_initial_s" in p for p in problems)


def test_handshake_only_needs_only_the_joints():
    assert ExecutorSettings.problems_of(params(handshake_only=True, fps=0.0, camera_topics=[""])) == []
    assert "'joint_names' is empty" in ExecutorSettings.problems_of(params(handshake_only=True, joint_names=[""]))[0]
    assert settings(handshake_only=True, fps=0.0).failsafe is None  # it never streams


def test_generated_client_id_is_a_valid_name_from_host_and_namespace():
    assert default_client_id("robot-7.lab", "/left/arm") == "robot_7_lab_left_arm"
    assert settings(client_id="").client_id == "host"


def test_timing_warnings_name_the_conflict_with_the_chunk_length():
    warnings = timing_warnings(settings(max_action_age_s=1.0, degraded_after_s=0.5), chunk_size=50)
    assert any("max_action_age_s 1.0" in w for w in warnings) and any("degraded_after_s 0.5" in w for w in warnings)
    assert timing_warnings(settings(), chunk_size=50) == []


def test_append_mode_merges_once_per_chunk_replace_mode_once_the_buffer_is_reached():
    tight = settings(fps=30.0, buffer_time_s=0.5, degraded_after_s=1.5)  # chunk of 50: 1.67 s
    assert any("1.667 s in append mode" in w for w in timing_warnings(tight, chunk_size=50))
    assert timing_warnings(tight, chunk_size=50, replace_mode=True) == []  # 1.17 s between merges


# ------------------------------------------------------- observation assembly


def test_joint_state_is_mapped_by_name_not_index():
    sample = map_joint_state(JOINTS, ["c", "extra", "a", "b"], [3.0, 9.0, 1.0, 2.0], [30.0, 90.0, 10.0, 20.0])
    assert sample.positions.tolist() == [1.0, 2.0, 3.0]
    assert sample.velocities.tolist() == [10.0, 20.0, 30.0]
    assert map_joint_state(JOINTS, ["a", "b", "c"], [1, 2, 3], []).velocities is None
    with pytest.raises(JointStateError, match=r"lacks joints \['c'\]"):
        map_joint_state(JOINTS, ["a", "b"], [1.0, 2.0])
    with pytest.raises(JointStateError, match="3 names but 2 positions"):
        map_joint_state(JOINTS, ["a", "b", "c"], [1.0, 2.0])


def assembler(include_velocity=False, cameras=(CAMERA,)) -> ObservationAssembler:
    return ObservationAssembler(JOINTS, cameras, include_velocity, max_age_s=0.5)


def test_observation_uses_the_newest_samples_and_the_velocity_option():
    holder = assembler(include_velocity=True)
    holder.on_joint_state(["b", "a", "c"], [2.0, 1.0, 3.0], [0.2, 0.1, 0.3], now_s=10.0)
    holder.on_joint_state(["b", "a", "c"], [5.0, 4.0, 6.0], [0.5, 0.4, 0.6], now_s=10.1)
    frame = CompressedImage(format="jpeg")
    holder.on_camera(CAMERA, frame, now_s=10.2)
    observation = holder.assemble(now_s=10.3)
    assert observation.state.tolist() == pytest.approx([4.0, 5.0, 6.0, 0.4, 0.5, 0.6])
    assert observation.state.dtype == np.float32
    assert observation.cameras[CAMERA] is frame
    assert observation.oldest_age_s == pytest.approx(0.2)


def test_observation_is_not_sent_when_data_is_missing_or_too_old():
    holder = assembler()
    assert "no joint state" in holder.assemble(1.0).reason
    holder.on_joint_state(["a", "b", "c"], [1.0, 2.0, 3.0], [], now_s=1.0)
    missing = holder.assemble(1.1)
    assert isinstance(missing, NotSent) and "has not published" in missing.reason and not missing.too_old
    holder.on_camera(CAMERA, Image(), now_s=1.0)
    assert not isinstance(holder.assemble(1.4), NotSent)
    old = holder.assemble(1.6)
    assert old.too_old and "joint state 0.600 s" in old.reason and "observation.images.front" in old.reason
    velocity_holder = assembler(include_velocity=True, cameras=())
    velocity_holder.on_joint_state(["a", "b", "c"], [1.0, 2.0, 3.0], [], now_s=1.0)
    assert "no velocities" in velocity_holder.assemble(1.0).reason


def test_a_wrong_joint_state_is_counted_not_stored():
    holder = assembler(cameras=())
    holder.on_joint_state(["a"], [1.0], [], now_s=1.0)
    assert holder.joint_state_errors == 1
    assert "lacks joints" in holder.assemble(1.0).reason


def test_observation_message_carries_ids_state_cameras_and_prefix():
    holder = assembler()
    holder.on_joint_state(["a", "b", "c"], [1.0, 2.0, 3.0], [], now_s=1.0)
    holder.on_camera(CAMERA, images.rgb_to_raw(np.zeros((8, 8, 3), np.uint8)), now_s=1.0)
    request = RequestId("s1", "arm", 7, 2, 1, 123)
    prefix = np.ones((4, 3), np.float32)
    msg = to_message(request, "pick", holder.assemble(1.0), 90, 3, prefix, prefix * 2)
    assert (msg.session_id, msg.seq, msg.episode, msg.epoch, msg.sent_monotonic_ns) == ("s1", 7, 2, 1, 123)
    assert list(msg.state) == [1.0, 2.0, 3.0] and list(msg.compressed_camera_names) == [CAMERA]
    assert (msg.inference_delay_steps, msg.prefix_steps, len(msg.prefix_model)) == (3, 4, 12)


# ----------------------------------------------------------- chunk acceptance


PENDING = RequestId("s1", "arm", 5, 2, 1, 1000)


@pytest.mark.parametrize(
    ("changed", "code"),
    [
        (dict(seq=4), "stale_seq"),
        (dict(episode=1), "stale_episode"),
        (dict(epoch=0), "stale_epoch"),
        (dict(session_id="s0"), "foreign_session"),
        (dict(client_id="other"), "foreign_client"),
        (dict(sent_monotonic_ns=999), "stale_seq"),
    ],
)
def test_a_chunk_not_answering_the_latest_request_is_rejected(changed, code):
    got = RequestId(**{**PENDING.__dict__, **changed})
    assert rejection(chunk(got), PENDING, MODEL)[0] == code


def test_wrong_model_names_shape_nan_and_refusals_are_rejected():
    assert rejection(chunk(PENDING), PENDING, MODEL) is None
    assert rejection(chunk(PENDING), None, MODEL)[0] == "late"
    assert rejection(chunk(PENDING, model_fingerprint="0" * 16), PENDING, MODEL)[0] == "wrong_model"
    assert rejection(chunk(PENDING, action_names=("b", "a", "c")), PENDING, MODEL)[0] == "wrong_action_names"
    assert rejection(chunk(PENDING, actions=np.zeros((5, 2))), PENDING, MODEL)[0] == "bad_shape"
    assert rejection(chunk(PENDING, actions=np.zeros((0, 3))), PENDING, MODEL)[0] == "bad_shape"
    nan = np.zeros((5, 3)); nan[2, 1] = np.nan  # noqa: E702
    assert rejection(chunk(PENDING, actions=nan), PENDING, MODEL)[0] == "non_finite"
    refused = rejection(chunk(PENDING, status=1, error="state has 4 values"), PENDING, MODEL)
    assert refused == ("refused", "server answered status 1: state has 4 values")


def test_in_flight_hands_over_only_the_answer_and_counts_drops():
    in_flight = InFlight()
    in_flight.start(PENDING, MODEL)
    stale = RequestId(**{**PENDING.__dict__, "seq": 4})
    assert in_flight.offer_chunk(chunk(stale), 5) == "stale_seq"
    threading.Timer(0.05, lambda: in_flight.offer_chunk(chunk(PENDING), 2000)).start()
    answer = in_flight.wait(2.0)
    assert answer.chunk is not None and answer.received_ns == 2000 and not answer.timed_out
    assert in_flight.offer_chunk(chunk(PENDING), 3000) == "late"  # the request is over
    in_flight.start(PENDING, MODEL)
    assert in_flight.wait(0.01).timed_out
    in_flight.start(PENDING, MODEL)
    in_flight.cancel()
    cancelled = in_flight.wait(1.0)
    assert cancelled.cancelled and not cancelled.timed_out
    drops = in_flight.drops()
    assert drops.counts == {"stale_seq": 1, "late": 1} and drops.total == 2


def test_a_refusal_of_the_request_in_flight_ends_the_wait_at_once():
    in_flight = InFlight()
    in_flight.start(PENDING, MODEL)
    threading.Timer(0.05, lambda: in_flight.offer_chunk(chunk(PENDING, status=1, error="state has 4 values"), 7)).start()
    started = time.monotonic()
    answer = in_flight.wait(5.0)
    assert time.monotonic() - started < 2.0, "waited for the timeout despite the refusal"
    assert answer.chunk is None and not answer.timed_out and not answer.cancelled
    assert answer.refusal == "server answered status 1: state has 4 values"
    assert in_flight.drops().counts == {"refused": 1}


# ------------------------------------------------------------ output messages


def test_output_messages_carry_joint_names_and_values_in_order():
    action = np.array([0.1, 0.2, 0.3])
    forward = output_mode("forward_command").build(JOINTS, action, 1 / 30)
    assert isinstance(forward, Float64MultiArray) and list(forward.data) == pytest.approx([0.1, 0.2, 0.3])
    assert forward.layout.dim[0].size == 3
    trajectory = output_mode("joint_trajectory").build(JOINTS, action, 0.02)
    assert isinstance(trajectory, JointTrajectory) and list(trajectory.joint_names) == list(JOINTS)
    assert len(trajectory.points) == 1 and list(trajectory.points[0].positions) == pytest.approx([0.1, 0.2, 0.3])
    assert (trajectory.points[0].time_from_start.sec, trajectory.points[0].time_from_start.nanosec) == (0, 20_000_000)
    state = output_mode("joint_state").build(JOINTS, action, 0.02)
    assert isinstance(state, JointState) and list(state.name) == list(JOINTS)
    assert list(state.position) == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="2 values for 3 joints"):
        output_mode("joint_state").build(JOINTS, action[:2], 0.02)


# -------------------------------------------------------------- trigger rule


def test_a_request_is_due_when_the_queue_covers_at_most_the_buffer_time():
    assert request_due(0.0, 0.5) and request_due(0.5, 0.5)
    assert not request_due(0.51, 0.5)


# ------------------------------------------------ core and the network worker


def test_one_request_in_flight_merges_and_then_waits_for_the_buffer_to_drain():
    clock, core, link, worker = connected()
    assert core.state is ExecutorState.STREAMING
    assert not worker.step(), "no observation without sensor data"
    assert core.snapshot(clock()).last_problem.startswith("no joint state")
    feed(core, clock)
    assert worker.step() and counts(core, clock).chunks_merged == 1 and counts(core, clock).queue_depth == 10
    assert not worker.step(), "queue covers 1 s > buffer 0.25 s: no request"
    assert len(link.sent) == 1
    assert counts(core, clock).latency_ms_p50 == pytest.approx(20.0)
    for _ in range(8):
        clock.t += 0.1
        assert core.control_tick(clock()) is not None
    feed(core, clock)
    assert worker.step() and len(link.sent) == 2
    seqs = [prepared.request.seq for prepared in link.sent]
    assert seqs == sorted(set(seqs))


def test_control_tick_executes_in_order_then_holds_the_measured_position():
    clock, core, link, worker = connected()
    assert core.control_tick(clock()) is None, "nothing measured, nothing commanded: nothing to hold"
    feed(core, clock)
    assert core.control_tick(clock()).tolist() == pytest.approx([0.1, 0.2, 0.3])  # empty queue: hold, by name
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


def test_timeouts_reconnect_with_a_bumped_epoch_and_a_changed_model_is_dead():
    clock, core, link, worker = connected()
    feed(core, clock)
    link.silent = True
    worker.step()
    worker.step()
    assert counts(core, clock).request_timeouts == 2 and core.state is ExecutorState.RECONNECTING
    clock.t += 1.0
    link.silent, link.instance = False, "i2"
    assert worker.step() and core.state is ExecutorState.STREAMING
    identity = core.identity
    assert (identity.epoch, identity.session_id, identity.instance_id) == (1, "s2", "i2")
    feed(core, clock)
    worker.step()
    assert link.sent[-1].request.epoch == 1 and counts(core, clock).chunks_merged == 1
    # The server restarts with the joints in another order (its old instance has gone silent).
    clock.t += core.settings.failsafe.heartbeat_timeout_s + 0.1
    core.on_heartbeat("i3", clock())
    assert core.state is ExecutorState.RECONNECTING
    link.capabilities = ServerCapabilities(**{**CAPABILITIES.__dict__, "action_names": ("b", "a", "c")})
    link.instance = "i3"
    clock.t += 1.0
    worker.step()
    assert core.state is ExecutorState.DEAD and "action names" in counts(core, clock).reason
    assert link.sessions == 2, "no session is opened with a different model"
    assert core.control_tick(clock()) is not None  # one final fallback
    assert core.control_tick(clock()) is None


def test_reset_clears_the_queue_bumps_the_episode_and_drops_the_old_answer():
    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    session, episode = core.reset_episode()
    assert (session, episode, counts(core, clock).queue_depth) == ("s1", 1, 0)
    feed(core, clock)
    worker.step()
    assert link.sent[-1].request.episode == 1


def test_pause_holds_and_sends_nothing():
    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    core.pause(clock())
    assert core.control_tick(clock()).tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert counts(core, clock).queue_depth == 10
    clock.t += 100.0
    assert not core.request_due(clock()) and core.state is not ExecutorState.DEAD
    core.resume(clock())
    assert counts(core, clock).paused is False
    # A long pause re-opens the session (the server may have closed it as idle).
    reason = counts(core, clock).reason
    assert core.state is ExecutorState.RECONNECTING and "re-opening the session" in reason
    assert "100.0 s without an observation" in reason and "after 10 s" in reason, reason


@pytest.mark.parametrize("idle_timeout_s, pause_s", [(10.0, 1.0), (math.inf, 1000.0)],
                         ids=["a short pause", "a server that never closes idle sessions"])
def test_a_pause_within_the_granted_idle_timeout_keeps_the_session(idle_timeout_s, pause_s):
    clock, core, link, worker = connected(idle_timeout_s=idle_timeout_s)
    feed(core, clock)
    worker.step()
    state = core.state
    core.pause(clock())
    clock.t += pause_s
    core.resume(clock())
    assert core.state is state


def test_a_resume_counts_the_quiet_time_before_the_pause_against_the_granted_idle_timeout():
    clock, core, link, worker = connected(idle_timeout_s=3.0)
    feed(core, clock)
    worker.step()  # the last observation the server hears
    state = core.state
    clock.t += 1.0  # playing the queue, nothing due yet
    core.pause(clock())
    clock.t += 0.4
    core.resume(clock())
    assert core.state is state, "1.4 s quiet of a 3 s idle timeout: the session is kept"
    clock.t += 0.2
    core.pause(clock())
    clock.t += 0.2  # a short pause, but 1.8 s since the server last heard from this session
    core.resume(clock())
    assert core.state is ExecutorState.RECONNECTING, counts(core, clock).reason



def test_the_session_identity_is_replaced_whole_and_transitions_are_read_once():
    clock, core, link, worker = connected()
    before = core.identity
    core.reset_episode()
    assert (before.episode, core.identity.episode) == (0, 1), "a reader's identity never changes under it"
    assert core.identity.session_id == before.session_id == "s1"
    transitions, seen = core.transitions_since(0)
    assert [t.to_state for t in transitions] == [ExecutorState.STREAMING] and seen == 1
    assert core.transitions_since(seen) == ((), seen)


def test_telemetry_fills_every_status_field():
    from lerobot_ros.wire import control_plane

    clock, core, link, worker = connected()
    feed(core, clock)
    worker.step()
    telemetry = counts(core, clock)
    msg = control_plane.executor_status_to_msg(telemetry, _time())
    assert msg.state_name == "STREAMING" and msg.queue_depth == 10 and msg.requests_sent == 1
    assert msg.latency_ms_p50 == pytest.approx(20.0) and msg.client_id == "arm" and msg.fallback == "hold"
    diagnostic = control_plane.executor_diagnostic("x", telemetry)
    assert diagnostic.level == b"\x00" and {value.key for value in diagnostic.values} >= {"queue_depth", "state_name"}


def _time():
    from builtin_interfaces.msg import Time

    return Time(sec=1)


def test_worker_thread_stops_promptly():
    clock, core, link, worker = connected()
    worker.idle_s = 0.01
    worker.start()
    time.sleep(0.05)
    started = time.monotonic()
    worker.stop()
    worker.join(2.0)
    assert not worker.is_alive() and time.monotonic() - started < 1.0
    assert math.isfinite(counts(core, clock).queued_time_s)


def test_a_due_request_that_cannot_be_sent_is_retried_per_policy_step_not_per_control_tick():
    clock, core, link, worker = connected()  # fps 10: one retry per 0.1 s
    attempts = []
    prepare = core.prepare_request
    core.prepare_request = lambda *args: attempts.append(1) or prepare(*args)
    worker.start()
    try:
        ticking_until = time.monotonic() + 0.35
        while time.monotonic() < ticking_until:  # a 1 kHz control tick saying "due" every time
            core.wake_worker()
            time.sleep(0.001)
        assert 2 <= len(attempts) <= 6, f"{len(attempts)} attempts in 0.35 s without sensor data"
        assert not link.sent
        feed(core, clock)
        sent_by = time.monotonic() + 1.0
        while not link.sent and time.monotonic() < sent_by:
            core.wake_worker()
            time.sleep(0.001)
        assert link.sent, "the retry after sensor data arrived sent the request"
    finally:
        worker.stop()
        worker.join(2.0)


def test_only_the_policy_cameras_are_sent_and_action_age_counts_from_the_oldest_sensor():
    clock, core, link, worker = connected(
        camera_names=[CAMERA, "observation.images.extra"], camera_topics=["/cam", "/extra"]
    )
    feed(core, clock)
    core.on_camera("observation.images.extra", Image(), clock())
    core.on_joint_state(["c", "b", "a"], [0.3, 0.2, 0.1], [], clock() + 0.3)  # fresher than the cameras
    clock.t += 0.3
    assert worker.step()
    prepared = link.sent[-1]
    assert list(prepared.observation.cameras) == [CAMERA], "the server refuses cameras its policy does not read"
    assert prepared.observation.oldest_age_s == pytest.approx(0.3)
    # The first action's source is the 0.3 s old camera frame, not the send time.
    assert core.snapshot(clock()).next_action_age_s == pytest.approx(0.3)


def test_a_second_server_heard_while_ours_beats_is_reported_not_followed():
    clock, core, link, worker = connected()
    core.on_heartbeat("i1", clock())
    clock.t += 0.5
    core.on_heartbeat("impostor", clock())
    assert core.state is ExecutorState.STREAMING or core.state is ExecutorState.CONNECTING
    assert core.identity.instance_id == "i1" and counts(core, clock).other_server_instance == "impostor"
    for _ in range(4):  # both keep beating: no flapping
        clock.t += 0.5
        core.on_heartbeat("i1", clock())
        core.on_heartbeat("impostor", clock())
    assert core.state is not ExecutorState.RECONNECTING
    clock.t += core.settings.failsafe.heartbeat_timeout_s + 0.1
    core.on_heartbeat("impostor", clock())
    assert core.state is ExecutorState.RECONNECTING, "ours went silent: the other one is a restart"


def test_server_rejections_are_counted_apart_from_timeouts_and_their_reason_is_reported():
    clock, core, link, worker = connected()
    feed(core, clock)
    link.refusal = "episode 0 is over; the session is at episode 2"
    worker.step()
    worker.step()
    status = counts(core, clock)
    assert (status.request_rejections, status.request_timeouts) == (2, 0)
    assert status.last_rejection_reason == "server answered status 1: episode 0 is over; the session is at episode 2"
    assert core.state is ExecutorState.RECONNECTING
    assert status.reason.startswith("2 failed requests in a row; the server refused the last: server answered")
