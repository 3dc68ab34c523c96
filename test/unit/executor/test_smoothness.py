"""Boundary jumps are measured where the executed stream really switches chunks."""

import numpy as np
import pytest

from lerobot_ros.executor.control.action_queue import ActionQueue
from lerobot_ros.executor.control.smoothness import SmoothnessTracker


def _chunk(start: float, length: int = 6, step: float = 0.1) -> np.ndarray:
    return (start + step * np.arange(length, dtype=np.float32))[:, None].repeat(2, axis=1)


def _play(queue: ActionQueue, tracker: SmoothnessTracker, count: int) -> list[float]:
    played = []
    for _ in range(count):
        action = queue.get()
        assert action is not None
        tracker.action_executed(action)
        played.append(float(action[0]))
    return played


def _merge(queue, tracker, chunk, delay, index_before):
    queued = queue.get_processed_left_over()
    queue.merge(chunk, chunk, real_delay=delay, action_index_before_inference=index_before)
    tracker.chunk_merged(queued if queued is not None else np.empty((0, 2)), queue.rtc_enabled)


def test_append_mode_counts_the_jump_only_once_the_old_rows_have_played():
    queue, tracker = ActionQueue(rtc_enabled=False, action_dim=2), SmoothnessTracker()
    _merge(queue, tracker, _chunk(0.0), 0, 0)
    _play(queue, tracker, 4)  # 0.0 .. 0.3, two rows (0.4, 0.5) left
    _merge(queue, tracker, _chunk(2.0), 0, 4)
    _play(queue, tracker, 2)
    assert tracker.boundaries == 0  # 0.4 and 0.5 were still the old chunk
    _play(queue, tracker, 1)  # 2.0 follows 0.5
    assert tracker.boundaries == 1
    assert tracker.jump_max == pytest.approx(1.5)
    assert tracker.step_mean == pytest.approx(0.1)  # the boundary is not an ordinary step


def test_replace_mode_jumps_from_the_last_executed_action_to_the_first_kept_row():
    queue, tracker = ActionQueue(rtc_enabled=True, action_dim=2), SmoothnessTracker()
    _merge(queue, tracker, _chunk(0.0), 0, 0)
    _play(queue, tracker, 3)  # last executed 0.2
    # two consumed since the request: rows 0.05, 0.15 trimmed
    _merge(queue, tracker, _chunk(0.05), 2, 1)
    assert _play(queue, tracker, 1) == [pytest.approx(0.25)]
    assert tracker.boundaries == 1 and tracker.jump_mean == pytest.approx(0.05)


def test_first_chunk_and_a_new_episode_are_not_boundaries():
    queue, tracker = ActionQueue(rtc_enabled=True, action_dim=2), SmoothnessTracker()
    _merge(queue, tracker, _chunk(0.0), 0, 0)
    _play(queue, tracker, 2)
    queue.clear()
    tracker.episode_reset()
    _merge(queue, tracker, _chunk(5.0), 0, 0)
    _play(queue, tracker, 2)
    assert tracker.boundaries == 0 and tracker.jump_max == 0.0
    assert tracker.steps == 2  # 0.0->0.1 and 5.0->5.1; nothing across the reset


def test_prefix_deviation_compares_the_new_chunk_with_what_was_executed_meanwhile():
    tracker = SmoothnessTracker()
    executed = _chunk(0.0, length=3)  # 0.0, 0.1, 0.2 played while the chunk was inferred
    tracker.overlap_measured(executed, _chunk(0.0, length=6) + np.float32(0.05))
    tracker.overlap_measured(executed, _chunk(1.0, length=6))
    # nothing executed meanwhile: nothing to compare
    tracker.overlap_measured(executed[:0], _chunk(9.0))
    assert tracker.overlaps == 2
    assert tracker.deviation_mean == pytest.approx((0.05 + 1.0) / 2)
    assert tracker.deviation_max == pytest.approx(1.0)
