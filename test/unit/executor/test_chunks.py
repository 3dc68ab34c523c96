"""Which chunk may answer the one request in flight (chunks.py)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from lerobot_ros.executor.requests.answer_rules import InFlight, rejection
from lerobot_ros.protocol.wire.data_plane import RequestId
from support.executor_harness import MODEL, chunk

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
    assert (
        rejection(chunk(PENDING, model_fingerprint="0" * 16), PENDING, MODEL)[0] == "wrong_model"
    )
    assert (
        rejection(chunk(PENDING, action_names=("b", "a", "c")), PENDING, MODEL)[0]
        == "wrong_action_names"
    )
    assert rejection(chunk(PENDING, actions=np.zeros((5, 2))), PENDING, MODEL)[0] == "bad_shape"
    assert rejection(chunk(PENDING, actions=np.zeros((0, 3))), PENDING, MODEL)[0] == "bad_shape"
    nan = np.zeros((5, 3))
    nan[2, 1] = np.nan  # noqa: E702
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
    threading.Timer(
        0.05,
        lambda: in_flight.offer_chunk(chunk(PENDING, status=1, error="state has 4 values"), 7),
    ).start()
    started = time.monotonic()
    answer = in_flight.wait(5.0)
    assert time.monotonic() - started < 2.0, "waited for the timeout despite the refusal"
    assert answer.chunk is None and not answer.timed_out and not answer.cancelled
    assert answer.refusal == "server answered status 1: state has 4 values"
    assert in_flight.drops().counts == {"refused": 1}
