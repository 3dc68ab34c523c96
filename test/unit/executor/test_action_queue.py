"""The executor's action queue: LeRobot's semantics in numpy, plus the delay clamp."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from lerobot_ros.executor.control.action_queue import ActionQueue

DIM = 3


def chunk(start: float, steps: int, dim: int = DIM) -> np.ndarray:
    """Rows start, start+1, ... so every row says where it came from."""
    return np.repeat(np.arange(start, start + steps, dtype=np.float32)[:, None], dim, axis=1)


def pop_values(queue: ActionQueue, count: int) -> list[float]:
    return [float(queue.get()[0]) for _ in range(count)]


def test_empty_queue_has_nothing_to_give():
    queue = ActionQueue(rtc_enabled=False)
    assert queue.get() is None
    assert queue.qsize() == 0 and queue.empty()
    assert queue.get_left_over() is None and queue.get_processed_left_over() is None
    assert queue.snapshot() == (0, None, None)
    assert queue.next_action_age_s(now_s=5.0) is None


def test_append_mode_keeps_unexecuted_actions_and_appends_the_new_chunk():
    queue = ActionQueue(rtc_enabled=False)
    assert queue.merge(chunk(0, 4), chunk(100, 4), real_delay=2) == 0
    assert pop_values(queue, 3) == [100, 101, 102]
    # delay ignored when appending
    assert queue.merge(chunk(10, 3), chunk(110, 3), real_delay=5) == 0
    assert queue.get_action_index() == 0
    assert queue.qsize() == 4
    np.testing.assert_array_equal(queue.get_left_over()[:, 0], [3, 10, 11, 12])
    assert pop_values(queue, 4) == [103, 110, 111, 112]
    assert queue.get() is None


def test_replace_mode_trims_the_actions_executed_during_inference():
    queue = ActionQueue(rtc_enabled=True)
    queue.merge(chunk(0, 10), chunk(100, 10), real_delay=0)
    index_before = queue.get_action_index()
    pop_values(queue, 3)  # the robot executed 3 actions while the server inferred
    trimmed = queue.merge(
        chunk(20, 10), chunk(200, 10), real_delay=3, action_index_before_inference=index_before
    )
    assert trimmed == 3
    assert queue.get_action_index() == 0
    assert queue.qsize() == 7
    np.testing.assert_array_equal(queue.get_left_over()[:, 0], np.arange(23, 30))
    assert pop_values(queue, 1) == [203]


def test_replace_mode_clamps_the_delay_to_the_actions_actually_consumed():
    # The queue ran dry: latency says 5 steps passed, but only 2 actions were executed.
    # LeRobot would trim 5 and skip 3 actions the robot never ran.
    queue = ActionQueue(rtc_enabled=True)
    queue.merge(chunk(0, 2), chunk(100, 2), real_delay=0)
    pop_values(queue, 2)
    assert queue.get() is None
    trimmed = queue.merge(
        chunk(20, 10), chunk(200, 10), real_delay=5, action_index_before_inference=0
    )
    assert trimmed == 2
    assert pop_values(queue, 1) == [202]


def test_replace_mode_delay_is_clamped_to_zero_and_to_the_chunk_length():
    queue = ActionQueue(rtc_enabled=True)
    assert queue.merge(chunk(0, 4), chunk(100, 4), real_delay=-3) == 0
    assert queue.qsize() == 4
    # no index given: latency decides
    assert queue.merge(chunk(0, 4), chunk(100, 4), real_delay=9) == 4
    assert queue.qsize() == 0 and queue.get() is None
    np.testing.assert_array_equal(queue.get_left_over(), np.zeros((0, DIM), dtype=np.float32))


def test_a_chunk_merged_after_clear_counts_zero_consumed_actions():
    queue = ActionQueue(rtc_enabled=True)
    queue.merge(chunk(0, 5), chunk(100, 5), real_delay=0)
    index_before = queue.get_action_index()
    pop_values(queue, 2)
    queue.clear()  # stale actions dropped while the request was in flight
    assert (
        queue.merge(
            chunk(20, 5), chunk(200, 5), real_delay=2, action_index_before_inference=index_before
        )
        == 0
    )
    assert pop_values(queue, 1) == [200]


def test_left_overs_are_the_unexecuted_rows_in_both_spaces_and_are_copies():
    queue = ActionQueue(rtc_enabled=True)
    queue.merge(chunk(0, 6), chunk(100, 6), real_delay=0)
    pop_values(queue, 2)
    model, robot = queue.get_left_over(), queue.get_processed_left_over()
    np.testing.assert_array_equal(model[:, 0], [2, 3, 4, 5])
    np.testing.assert_array_equal(robot[:, 0], [102, 103, 104, 105])
    assert model.dtype == np.float32 and robot.dtype == np.float32
    model[:] = -1
    robot[:] = -1
    popped = queue.get()
    popped[:] = -1
    np.testing.assert_array_equal(queue.get_left_over()[:, 0], [3, 4, 5])
    np.testing.assert_array_equal(queue.get_processed_left_over()[:, 0], [103, 104, 105])


def test_merge_copies_the_callers_arrays():
    queue = ActionQueue(rtc_enabled=False)
    original, processed = chunk(0, 3), chunk(100, 3)
    queue.merge(original, processed, real_delay=0)
    original[:] = -1
    processed[:] = -1
    assert pop_values(queue, 1) == [100]
    assert float(queue.get_left_over()[0, 0]) == 1


def test_snapshot_reads_index_and_prefixes_capped_to_the_horizon():
    queue = ActionQueue(rtc_enabled=True)
    queue.merge(chunk(0, 10), chunk(100, 10), real_delay=0)
    pop_values(queue, 4)
    index, model, robot = queue.snapshot(max_steps=3)
    assert index == 4
    np.testing.assert_array_equal(model[:, 0], [4, 5, 6])
    np.testing.assert_array_equal(robot[:, 0], [104, 105, 106])
    full = queue.snapshot()
    assert full.left_over_model.shape == (6, DIM) and full.left_over_robot.shape == (6, DIM)
    assert queue.snapshot(max_steps=100).left_over_robot.shape == (6, DIM)
    assert queue.snapshot(max_steps=0).left_over_model.shape == (0, DIM)
    with pytest.raises(ValueError, match="max_steps must be >= 0"):
        queue.snapshot(max_steps=-1)


def test_clear_drops_everything_and_resets_the_index():
    queue = ActionQueue(rtc_enabled=False)
    queue.merge(chunk(0, 5), chunk(100, 5), real_delay=0, source_time_s=1.0)
    pop_values(queue, 2)
    queue.clear()
    assert queue.qsize() == 0 and queue.empty() and queue.get_action_index() == 0
    assert (
        queue.get() is None
        and queue.get_left_over() is None
        and queue.get_processed_left_over() is None
    )
    assert queue.next_action_age_s(now_s=2.0) is None
    assert queue.action_dim == DIM  # the robot's dimension outlives a clear


def test_queued_time_covers_the_unexecuted_actions():
    queue = ActionQueue(rtc_enabled=False)
    queue.merge(chunk(0, 15), chunk(100, 15), real_delay=0)
    pop_values(queue, 5)
    assert queue.queued_time_s(fps=20.0) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="fps must be a finite number > 0, got 0"):
        queue.queued_time_s(fps=0)


def test_next_action_age_follows_each_rows_source_observation():
    queue = ActionQueue(rtc_enabled=False)
    queue.merge(chunk(0, 2), chunk(100, 2), real_delay=0, source_time_s=10.0)
    queue.merge(chunk(10, 2), chunk(110, 2), real_delay=0, source_time_s=10.5)
    assert queue.next_action_age_s(now_s=11.0) == pytest.approx(1.0)
    pop_values(queue, 2)
    assert queue.next_action_age_s(now_s=11.0) == pytest.approx(0.5)
    queue.merge(chunk(20, 2), chunk(120, 2), real_delay=0)  # no source time given
    pop_values(queue, 2)
    assert queue.next_action_age_s(now_s=11.0) is None  # unknown: the caller treats it as stale


@pytest.mark.parametrize(
    ("original", "processed", "message"),
    [
        (
            np.zeros(3),
            np.zeros(3),
            r"original_actions must be 2-D \[T, action_dim\], got shape \(3,\)",
        ),
        (
            np.zeros((2, 3)),
            np.zeros((1, 2, 3)),
            r"processed_actions must be 2-D .* got shape \(1, 2, 3\)",
        ),
        (np.zeros((2, 3)), np.zeros((3, 3)), r"same shape, got \(2, 3\) and \(3, 3\)"),
        (np.zeros((0, 3)), np.zeros((0, 3)), r"at least one action .* got shape \(0, 3\)"),
    ],
)
def test_malformed_chunks_are_refused_with_expected_and_got(original, processed, message):
    queue = ActionQueue(rtc_enabled=True)
    with pytest.raises(ValueError, match=message):
        queue.merge(original, processed, real_delay=0)
    assert queue.qsize() == 0 and queue.get_left_over() is None


def test_a_chunk_of_another_action_dim_is_refused_and_the_queue_is_kept():
    queue = ActionQueue(rtc_enabled=False)
    queue.merge(chunk(0, 3), chunk(100, 3), real_delay=0)
    with pytest.raises(ValueError, match="must equal the queue's action_dim 3, got 4"):
        queue.merge(chunk(0, 3, dim=4), chunk(100, 3, dim=4), real_delay=0)
    assert queue.qsize() == 3
    declared = ActionQueue(rtc_enabled=True, action_dim=2)
    with pytest.raises(ValueError, match="action_dim 2, got 3"):
        declared.merge(chunk(0, 3), chunk(0, 3), real_delay=0)


def test_concurrent_pops_and_merges_lose_and_duplicate_nothing():
    queue = ActionQueue(rtc_enabled=False)
    merges, rows = 200, 5
    popped: list[float] = []
    done = threading.Event()

    def producer() -> None:
        for i in range(merges):
            queue.merge(chunk(i * rows, rows), chunk(i * rows, rows), real_delay=0)
        done.set()

    def consumer() -> None:
        while not (done.is_set() and queue.empty()):
            action = queue.get()
            if action is not None:
                popped.append(float(action[0]))

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert not any(thread.is_alive() for thread in threads)
    assert popped == list(range(merges * rows))  # in order, each exactly once


# ----------------------------------------------------------------- parity


@pytest.mark.parametrize("rtc_enabled", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_parity_with_lerobots_action_queue(rtc_enabled: bool, seed: int):
    """Same merges, same pops: same outputs as LeRobot whenever consumed == real_delay."""
    pytest.importorskip("lerobot")
    torch = pytest.importorskip("torch")
    from lerobot.policies.rtc import ActionQueue as LeRobotActionQueue
    from lerobot.policies.rtc import RTCConfig

    rng = np.random.default_rng(seed)
    theirs = LeRobotActionQueue(RTCConfig(enabled=rtc_enabled))
    ours = ActionQueue(rtc_enabled=rtc_enabled)

    def assert_same_left_overs() -> None:
        assert ours.qsize() == theirs.qsize()
        assert ours.empty() == theirs.empty()
        assert ours.get_action_index() == theirs.get_action_index()
        for mine, reference in (
            (ours.get_left_over(), theirs.get_left_over()),
            (ours.get_processed_left_over(), theirs.get_processed_left_over()),
        ):
            assert (mine is None) == (reference is None)
            if mine is not None:
                np.testing.assert_array_equal(mine, reference.numpy())

    merged_rows = 0
    for step in range(25):
        steps = int(rng.integers(1, 12))
        original = rng.standard_normal((steps, DIM)).astype(np.float32)
        processed = rng.standard_normal((steps, DIM)).astype(np.float32)
        index_before = ours.get_action_index()
        # Pop some actions "during inference"; sometimes more than are queued.
        consumed_pops = int(rng.integers(0, 8))
        for _ in range(consumed_pops):
            mine, reference = ours.get(), theirs.get()
            assert (mine is None) == (reference is None)
            if mine is not None:
                np.testing.assert_array_equal(mine, reference.numpy())
        consumed = ours.get_action_index() - index_before
        # With the index given, delay == consumed (where both agree); without it,
        # any delay (LeRobot and ours both use max(0, delay) then clamp to T).
        with_index = bool(rng.integers(0, 2))
        delay = consumed if with_index else int(rng.integers(-2, 14))
        kwargs = {"action_index_before_inference": index_before} if with_index else {}
        theirs.merge(
            torch.from_numpy(original.copy()), torch.from_numpy(processed.copy()), delay, **kwargs
        )
        trimmed = ours.merge(original, processed, delay, **kwargs)
        if rtc_enabled:
            assert trimmed == max(0, min(delay, steps))
        merged_rows += steps
        assert_same_left_overs()
        if step % 7 == 6:
            ours.clear()
            theirs.clear()
            assert_same_left_overs()

    while True:  # drain
        mine, reference = ours.get(), theirs.get()
        assert (mine is None) == (reference is None)
        if mine is None:
            break
        np.testing.assert_array_equal(mine, reference.numpy())
    assert_same_left_overs()
    assert merged_rows > 0
