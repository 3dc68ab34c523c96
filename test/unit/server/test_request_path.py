"""The server's request path with a real ACT checkpoint, no ROS graph.

Each malformed observation must be answered with a REJECTED chunk that says
what was expected and what arrived, and the session must keep working.
"""

import numpy as np
import pytest

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import chunk_from_msg
from support.request_harness import Harness


@pytest.fixture
def harness(runner):
    return Harness(runner)


def test_a_valid_observation_gets_a_chunk_in_both_spaces(harness):
    outcome = harness.send(harness.observation(seq=7))
    assert outcome.outcome == "ok", outcome.reply.error
    client, msg = harness.published[-1]
    chunk = chunk_from_msg(msg)
    assert client == "arm" and chunk.request.seq == 7
    assert chunk.actions_robot.shape == (50, 6) and chunk.actions_model.shape == (50, 6)
    assert not np.allclose(chunk.actions_robot, chunk.actions_model)  # postprocessing unnormalized
    assert chunk.server_durations_s["inference"] > 0
    assert harness.audit[-1]["outcome"] == "ok" and harness.audit[-1]["seq"] == 7


def test_different_states_give_different_chunks(harness):
    harness.send(harness.observation(state=np.zeros(6)))
    harness.send(harness.observation(state=np.full(6, 50.0)))
    first, second = (chunk_from_msg(msg).actions_robot for _, msg in harness.published)
    assert not np.allclose(first, second)


def _truncated_jpeg():
    data = images.rgb_to_compressed(np.zeros((96, 128, 3), np.uint8), 90).data
    return bytes(data)[: len(data) // 2]


@pytest.mark.parametrize(
    ("mutate", "expected_error"),
    [
        (lambda h: h.observation(state=np.zeros(5)), "state has 5 values; the policy expects 6"),
        (lambda h: h.observation(state=[0, 0, np.nan, 0, 0, 0]), "not finite at indices [2]"),
        (lambda h: h.observation(state=[0, 0, 0, np.inf, 0, 0]), "not finite at indices [3]"),
        (lambda h: h.observation(schema_version=9), "schema version 9; expected 4..4"),
        (
            lambda h: h.observation(compressed_camera_names=["observation.images.wrist"]),
            "missing ['observation.images.front']",
        ),
        (lambda h: h.observation(compressed_camera_names=[], compressed_images=[]), "missing"),
        (lambda h: h.observation(session_id="bogus"), "'bogus' is not this client's open session"),
        (
            lambda h: h.observation(
                frame=np.random.default_rng(0).integers(0, 255, (1200, 1600, 3), np.uint8)
            ),
            "200000",
        ),
        (
            lambda h: _with_jpeg_bytes(h.observation(), b"not a jpeg at all"),
            "camera 'observation.images.front'",
        ),
        (
            lambda h: _with_jpeg_bytes(h.observation(), _truncated_jpeg()),
            "camera 'observation.images.front'",
        ),
        (lambda h: h.observation(prefix_steps=3), "prefix_model holds 0 values; expected 3 x 6"),
        (
            lambda h: h.observation(client_id="other_arm"),
            "client id 'other_arm' arrived on the topic of client 'arm'",
        ),
        (
            lambda h: _with_png(h.observation(), (5000, 4000)),
            "at most 16777216 pixels, got a PNG declaring 5000x4000",
        ),
    ],
)
def test_malformed_observations_are_rejected_and_the_session_keeps_working(
    harness, mutate, expected_error
):
    outcome = harness.send(mutate(harness))
    assert outcome.outcome == "rejected"
    client, msg = harness.published[-1]
    assert client == "arm", "the answer goes to the topic the observation came on"
    assert msg.status == ActionChunk.STATUS_REJECTED and expected_error in msg.error, msg.error
    assert len(msg.actions_robot) == 0
    assert (
        harness.audit[-1]["outcome"] == "rejected" and expected_error in harness.audit[-1]["error"]
    )
    assert harness.send(harness.observation(seq=1)).outcome == "ok"


def _with_png(msg, shape):
    import cv2

    # a small file declaring a huge image
    ok, png = cv2.imencode(".png", np.zeros((*shape, 3), np.uint8))
    msg.compressed_images[0].format, msg.compressed_images[0].data = "png", png.tobytes()
    return msg


def _with_jpeg_bytes(msg, data):
    msg.compressed_images[0].data = data
    return msg


def test_an_older_episode_is_refused_and_a_newer_one_resets_processors(harness, monkeypatch):
    resets = []
    monkeypatch.setattr(
        harness.runner, "reset_session", lambda processors: resets.append(processors)
    )
    assert harness.send(harness.observation(episode=2)).outcome == "ok"
    assert resets == [harness.session.processors] and harness.session.episode == 2
    outcome = harness.send(harness.observation(episode=1))
    assert outcome.outcome == "rejected" and "episode 1 is over" in outcome.reply.error


def test_an_observation_for_a_closed_session_is_dropped_unanswered(harness):
    msg = harness.observation()
    harness.sessions.remove("arm", harness.session.session_id)
    assert harness.send(msg).outcome == "dropped"
    assert harness.published == [] and harness.audit[-1]["outcome"] == "dropped"


def test_a_failing_policy_is_answered_with_failed_and_the_handler_survives(harness, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(harness.runner, "infer", explode)
    outcome = harness.send(harness.observation())
    assert outcome.outcome == "failed" and "CUDA out of memory" in outcome.reply.error
    assert harness.published[-1][1].status == ActionChunk.STATUS_FAILED


def test_sessions_have_their_own_processor_instances(harness):
    other = harness.open("other_arm")
    assert other.processors.preprocessor is not harness.session.processors.preprocessor
    assert other.processors.postprocessor is not harness.session.processors.postprocessor


def test_a_stopping_worker_answers_the_observations_still_waiting_with_a_refusal(harness):
    import logging

    from lerobot_ros.protocol.telemetry import ServerStats
    from lerobot_ros.server.requests.scheduler import RoundRobinScheduler
    from lerobot_ros.server.requests.serial_worker import DRAINING, InferenceWorker

    scheduler = RoundRobinScheduler()
    other = harness.open("other_arm")
    scheduler.deposit("arm", harness.observation(seq=1))
    scheduler.deposit("other_arm", harness.observation(session=other, seq=4))
    worker = InferenceWorker(
        scheduler, harness.handler, ServerStats(), logging.getLogger("worker_test")
    )
    worker.stop()  # before it took anything: both were waiting when the drain began
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive()
    answered = {client: chunk_from_msg(msg) for client, msg in harness.published}
    assert set(answered) == {"arm", "other_arm"}
    assert all(
        chunk.status == ActionChunk.STATUS_REJECTED and chunk.error == DRAINING
        for chunk in answered.values()
    )
    assert sorted((line["client"], line["seq"], line["outcome"]) for line in harness.audit) == [
        ("arm", 1, "rejected"),
        ("other_arm", 4, "rejected"),
    ]


def test_an_extra_camera_the_policy_does_not_read_is_ignored(harness):
    """The open warns about it and the executor leaves it out; an observation carrying it is served
    as without it."""
    plain = harness.observation(seq=1, state=np.full(6, 0.3))
    extra = harness.observation(seq=2, state=np.full(6, 0.3))
    extra.compressed_camera_names = [*extra.compressed_camera_names, "observation.images.wrist"]
    extra.compressed_images = [
        *extra.compressed_images,
        images.rgb_to_compressed(np.zeros((96, 128, 3), np.uint8), 90),
    ]
    assert harness.send(plain).outcome == "ok"
    outcome = harness.send(extra)
    assert outcome.outcome == "ok", outcome.reply.error
    first, second = (chunk_from_msg(msg).actions_robot for _, msg in harness.published[-2:])
    np.testing.assert_allclose(first, second, atol=1e-5)
