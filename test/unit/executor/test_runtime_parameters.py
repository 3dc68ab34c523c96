"""Runtime parameters of the executor: a change checked like at start-up, then used whole by the
next tick."""

from __future__ import annotations

import pytest

from lerobot_ros.node_shell.parameters import runtime_change
from support.executor_harness import connected, feed


def streaming():
    clock, core, link, worker = connected()
    feed(core, clock)
    assert worker.step()  # a chunk whose rows are 0, 1, 2, ... on every joint
    return clock, core


def test_a_new_step_limit_applies_from_the_next_tick():
    clock, core = streaming()
    assert core.control_tick(clock())[0] == 0.0  # row 0, no limit
    changed, refusal = runtime_change(core.settings, {"max_step_per_tick": 0.25})
    assert refusal == ""
    core.change_settings(changed)
    # row 1 is 1.0 away: limited to one step
    assert core.control_tick(clock())[0] == pytest.approx(0.25)
    # the rest kept
    assert core.settings.max_step_per_tick == 0.25 and core.settings.client_id == "arm"


def test_new_joint_limits_and_fallback_apply_and_invalid_ones_are_refused_with_the_reason():
    clock, core = streaming()
    changed, _ = runtime_change(
        core.settings, {"joint_upper_limits": [0.5, 0.5, 0.5], "fallback": "zero"}
    )
    core.change_settings(changed)
    for _ in range(3):
        command = core.control_tick(clock())
    assert command.tolist() == [0.5, 0.5, 0.5]  # row 2 clamped to the new upper limits
    assert core.snapshot(clock()).telemetry.fallback == "zero"
    assert runtime_change(core.settings, {"joint_lower_limits": [0.0, 0.9, 0.0]}) == (
        None,
        "'joint_lower_limits' is above 'joint_upper_limits' for ['b']",
    )
    assert runtime_change(core.settings, {"joint_lower_limits": [0.0]})[1] == (
        "'joint_lower_limits' holds 1 values, expected none or 3 (one per joint)"
    )
    assert "takes effect only at start-up" in runtime_change(core.settings, {"fps": 50.0})[1]
