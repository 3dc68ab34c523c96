"""When the demo may end its run: never inside the refill that follows one of its own episode
resets."""

from __future__ import annotations

from types import SimpleNamespace

from lerobot_ros.demo import RESET_REFILL_S, Recording


def recording_with(state: str, reset_age_s: float | None) -> Recording:
    recording = Recording()
    recording.status.append((recording.now(), SimpleNamespace(state_name=state)))
    if reset_age_s is not None:
        recording.resets.append(recording.now() - reset_age_s)
    return recording


def test_an_empty_queue_just_after_a_reset_is_the_new_episode_refilling():
    assert recording_with("STALLED", reset_age_s=0.2).refilling_after_reset()


def test_a_stall_long_after_the_last_reset_is_not_excused():
    assert not recording_with("STALLED", reset_age_s=RESET_REFILL_S + 0.5).refilling_after_reset()


def test_a_stall_without_any_reset_is_not_excused():
    assert not recording_with("STALLED", reset_age_s=None).refilling_after_reset()


def test_a_streaming_loop_just_after_a_reset_has_nothing_to_wait_for():
    assert not recording_with("STREAMING", reset_age_s=0.2).refilling_after_reset()
    assert not recording_with("DEGRADED", reset_age_s=0.2).refilling_after_reset()
