"""Micro-batching through the real request path, no ROS graph.

Batch invariance: each request's chunk from a forward pass shared by N
sessions equals the chunk the same request gets alone, in model and robot
space, within a float tolerance per family (a batched matmul sums in another
order than a single one; nothing else may differ). Measured here: at most
1.0e-6 (ACT) and 4.8e-7 (SmolVLA) in either space; the tolerance is 1e-5:
  ACT            deterministic
  tiny SmolVLA   per-request noise from the request's seed; with and
                 without RTC, mixed delays and prefix lengths, samples without
                 a prefix, a session without RTC in the same forward pass
A rejected request never enters the forward pass, and a forward pass that
raises is rerun one request at a time.
"""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire.data_plane import chunk_from_msg, observation_from_msg
from support.request_harness import Harness

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_batching")

ACT_TOLERANCE = 1e-5
SMOLVLA_TOLERANCE = 1e-5
TASK = "pick up the cube"


def _chunks(harness, messages):
    """The chunks published for ``messages``, by client, from the last len(messages)
    publications."""
    published = harness.published[-len(messages) :]
    return {client: chunk_from_msg(msg) for client, msg in published}


def _alone(harness, messages):
    """Each message sent on its own, after the batch: its chunk then (same seq, so the same
    noise)."""
    chunks = {}
    for msg in messages:
        harness.send(msg, key=msg.client_id)
        client, published = harness.published[-1]
        chunks[client] = chunk_from_msg(published)
    return chunks


def _assert_invariant(batched, alone, tolerance):
    for client, chunk in batched.items():
        assert chunk.status == ActionChunk.STATUS_OK, chunk.error
        for space in ("actions_model", "actions_robot"):
            difference = float(np.abs(getattr(chunk, space) - getattr(alone[client], space)).max())
            assert difference <= tolerance, (
                f"{client} {space}: batched differs from alone by {difference}"
            )
        assert (chunk.rtc_applied, chunk.inference_delay_steps) == (
            alone[client].rtc_applied,
            alone[client].inference_delay_steps,
        )


@pytest.fixture
def act(runner):
    harness = Harness(runner)
    sessions = [harness.session] + [harness.open(f"arm_{index}") for index in range(1, 4)]
    return harness, sessions


def test_each_act_request_in_a_batch_gets_the_chunk_it_gets_alone(act):
    harness, sessions = act
    rng = np.random.default_rng(0)
    messages = [
        harness.observation(
            session,
            seq=3,
            state=rng.uniform(-1, 1, 6),
            frame=rng.integers(0, 255, (96, 128, 3), np.uint8),
        )
        for session in sessions
    ]
    answered = harness.send_batch(messages)
    assert answered.forwards == [4] and [o.outcome for o in answered.outcomes] == ["ok"] * 4
    batched = _chunks(harness, messages)
    assert {chunk.batch_size for chunk in batched.values()} == {4}
    assert [line["batch_size"] for line in harness.audit[-4:]] == [4, 4, 4, 4]
    alone = _alone(harness, messages)
    assert {chunk.batch_size for chunk in alone.values()} == {1}
    _assert_invariant(batched, alone, ACT_TOLERANCE)
    first, second = (batched[s.client_id].actions_robot for s in sessions[:2])
    assert not np.allclose(first, second), "different observations must give different chunks"


def test_a_rejected_request_is_answered_alone_and_does_not_block_its_batch(act):
    harness, sessions = act
    good = [
        harness.observation(session, seq=1, state=np.full(6, 0.2 * i))
        for i, session in enumerate(sessions[:3])
    ]
    bad = harness.observation(sessions[3], seq=1, state=np.zeros(5))
    answered = harness.send_batch([good[0], bad, good[1], good[2]])
    assert [o.outcome for o in answered.outcomes] == ["ok", "rejected", "ok", "ok"]
    assert answered.forwards == [3]
    assert (
        "state has 5 values" in answered.outcomes[1].reply.error
        and answered.outcomes[1].reply.batch_size == 0
    )
    batched = {
        client: chunk_from_msg(msg)
        for client, msg in harness.published[-4:]
        if client != sessions[3].client_id
    }
    assert {chunk.batch_size for chunk in batched.values()} == {3}
    _assert_invariant(batched, _alone(harness, good), ACT_TOLERANCE)


def test_a_failing_forward_pass_is_rerun_one_request_at_a_time(act, monkeypatch, caplog):
    harness, sessions = act
    infer = harness.runner.infer
    poisoned = sessions[2].client_id

    def infer_failing_when_poisoned(prepared):
        # Fails whenever the poisoned session's request is in the pass: alone too.
        if any(request.processors is sessions[2].processors for request in prepared):
            raise RuntimeError("CUDA out of memory (simulated)")
        return infer(prepared)

    monkeypatch.setattr(harness.runner, "infer", infer_failing_when_poisoned)
    messages = [
        harness.observation(session, seq=2, state=np.full(6, 0.1 * i))
        for i, session in enumerate(sessions)
    ]
    answered = harness.send_batch(messages)
    assert [o.outcome for o in answered.outcomes] == ["ok", "ok", "failed", "ok"]
    assert answered.forwards == [1, 1, 1]
    assert "running them one at a time" in caplog.text
    chunks = _chunks(harness, messages)
    assert (
        chunks[poisoned].status == ActionChunk.STATUS_FAILED
        and "CUDA out of memory" in chunks[poisoned].error
    )
    assert [chunks[s.client_id].batch_size for s in sessions] == [1, 1, 0, 1]
    assert [line["outcome"] for line in harness.audit[-4:]] == ["ok", "ok", "failed", "ok"]


# ---- tiny SmolVLA: per-request noise and batched RTC ------------------------


@pytest.fixture(scope="module")
def smolvla(smolvla_checkpoint):
    from lerobot_ros.server.policy.checkpoint import load_policy

    return load_policy(str(smolvla_checkpoint), device="cpu")


def _smolvla_harness(smolvla, rtc):
    from lerobot_ros.server.policy.inference import PolicyRunner

    runner = PolicyRunner(smolvla, rtc_enabled=rtc, rtc_execution_horizon=10, noise_seed=11)
    harness = Harness(runner)
    harness.sessions.remove(harness.session.client_id, harness.session.session_id)
    return harness


def test_requests_prepared_side_by_side_never_draw_under_each_others_seed(smolvla):
    """Admission threads prepare concurrently: each request's noise comes from its own generator,
    and preparing
    leaves the global RNG (which the forward thread may be drawing from) untouched."""
    import threading

    import torch

    harness = _smolvla_harness(smolvla, rtc=False)
    runner = harness.runner
    session = harness.open("arm_seeded", task=TASK)
    before = torch.get_rng_state()
    runner.prepare(
        observation_from_msg(harness.observation(session, seq=3), 6),
        session.processors,
        TASK,
        False,
    )
    assert torch.equal(torch.get_rng_state(), before), (
        "prepare drew from or reseeded the global RNG"
    )

    seeds = [101, 202, 303, 404]
    alone = {seed: runner._request_noise(seed) for seed in seeds}
    assert not torch.equal(alone[101], alone[202])
    mismatches, stop = [], threading.Event()

    def draw(seed):
        for _ in range(40):
            if not torch.equal(runner._request_noise(seed), alone[seed]):
                mismatches.append(seed)

    def global_rng_user():  # another thread seeding and drawing from the global RNG meanwhile
        while not stop.is_set():
            torch.manual_seed(7)
            torch.randn(64)

    threads = [threading.Thread(target=draw, args=(seed,)) for seed in seeds] + [
        threading.Thread(target=global_rng_user)
    ]
    for thread in threads:
        thread.start()
    for thread in threads[:-1]:
        thread.join(60)
    stop.set()
    threads[-1].join(10)
    assert mismatches == []


@pytest.mark.parametrize("rtc", [False, True], ids=["without_rtc", "with_rtc"])
def test_each_smolvla_request_in_a_batch_gets_the_chunk_it_gets_alone(smolvla, rtc):
    harness = _smolvla_harness(smolvla, rtc)
    rng = np.random.default_rng(4)
    # (prefix steps, delay, the session asked for RTC): long, short, none, and a session without
    # RTC.
    shapes = [(12, 4, True), (3, 2, True), (0, 0, True), (7, 1, False), (10, 0, True)]
    messages = []
    for index, (steps, delay, asks_rtc) in enumerate(shapes):
        session = harness.open(f"arm_{index}", task=TASK, rtc=asks_rtc)
        prefix = rng.normal(size=(steps, 6)).astype(np.float32) if steps else None
        messages.append(
            harness.observation(
                session,
                seq=5,
                state=rng.uniform(-1, 1, 6),
                frame=rng.integers(0, 255, (96, 128, 3), np.uint8),
                prefix=prefix,
                delay=delay,
            )
        )
    # other token length: own pass
    other_task = harness.open("arm_other_task", task="stack the blocks", rtc=True)
    messages.append(
        harness.observation(
            other_task, seq=5, state=rng.uniform(-1, 1, 6), prefix=rng.normal(size=(5, 6)), delay=2
        )
    )

    answered = harness.send_batch(messages)
    assert answered.forwards == [5, 1], (
        "equal tasks share one forward pass, another task's tokens get their own"
    )
    batched = _chunks(harness, messages)
    assert [batched[msg.client_id].batch_size for msg in messages] == [5, 5, 5, 5, 5, 1]
    expected_rtc = [rtc and asks and steps > 0 for steps, _, asks in shapes] + [rtc]
    assert [batched[msg.client_id].rtc_applied for msg in messages] == expected_rtc
    _assert_invariant(batched, _alone(harness, messages), SMOLVLA_TOLERANCE)
    if rtc:  # the guidance happened per sample: each guided chunk starts on its own prefix
        for (steps, delay, asks), msg in zip(shapes, messages, strict=False):
            if asks and steps and delay:
                prefix = np.frombuffer(msg.prefix_model, np.float32).reshape(steps, 6)
                assert (
                    np.abs(batched[msg.client_id].actions_model[:delay] - prefix[:delay]).mean()
                    < 0.05
                )


def test_a_chunk_does_not_depend_on_its_batch_partners(smolvla):
    harness = _smolvla_harness(smolvla, rtc=True)
    sessions = [harness.open(f"arm_{index}", task=TASK, rtc=True) for index in range(3)]
    rng = np.random.default_rng(9)
    target = harness.observation(
        sessions[0], seq=1, state=np.zeros(6), prefix=rng.normal(size=(8, 6)), delay=3
    )
    first = [harness.observation(s, seq=1, state=rng.uniform(-1, 1, 6)) for s in sessions[1:]]
    harness.send_batch([target, *first])
    with_first = chunk_from_msg(harness.published[0][1]).actions_model
    second = [
        harness.observation(
            s, seq=2, state=rng.uniform(-1, 1, 6), prefix=rng.normal(size=(4, 6)), delay=1
        )
        for s in sessions[1:]
    ]
    harness.send_batch([*second, target])
    with_second = chunk_from_msg(harness.published[-1][1]).actions_model
    assert np.abs(with_first - with_second).max() <= SMOLVLA_TOLERANCE


def test_exclusive_and_groot_policies_never_batch(act_checkpoint):
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner
    from lerobot_ros.server.policy.policy_families import batches_across_sessions

    assert PolicyRunner(load_policy(str(act_checkpoint), device="cpu")).batchable
    assert not PolicyRunner(
        load_policy(str(act_checkpoint), device="cpu", serving_mode="exclusive")
    ).batchable
    assert [
        batches_across_sessions(family)
        for family in ("act", "smolvla", "pi0", "pi05", "groot", "diffusion")
    ] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]
