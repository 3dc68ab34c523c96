"""chunk_executor_node's runtime parameters over its real parameter service, while it streams.

A new max step shows in the very commands the robot receives; the fallback
in ``~/status``; a start-up parameter and an invalid limit are refused with
the reason, and the executor keeps streaming.
"""

from __future__ import annotations

import time

import numpy as np

from support.lifecycle import set_parameters

# per action at fps = control rate: far below what the random-weight policy asks for
MAX_STEP = 0.002


def test_a_new_max_step_and_fallback_apply_while_streaming_and_bad_sets_are_refused(
    policy_server, launched
):
    robot = launched("/param_arm", commands=[("forward_command", "/param_arm/commands")])
    executor = launched.executor("exec_params", robot.executor_parameters())
    executor.wait(
        lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 30, "two chunks merged"
    )

    startup_only, too_few, accepted = set_parameters(
        executor.node,
        "/exec_params",
        fps=50.0,
        joint_lower_limits=[-1.0, -1.0],
        max_step_per_tick=MAX_STEP,
    )
    assert (
        not startup_only.successful
        and "'fps' takes effect only at start-up" in startup_only.reason
    )
    assert (too_few.successful, too_few.reason) == (
        False,
        "'joint_lower_limits' holds 2 values, expected none or 6 (one per joint)",
    )
    assert accepted.successful, accepted.reason
    applied_at = time.monotonic()
    assert set_parameters(executor.node, "/exec_params", fallback="repeat_last")[0].successful

    last = executor.wait(lambda s: s.fallback == "repeat_last", 5, "the new fallback in ~/status")
    executor.spin(2.0)
    assert executor.process.poll() is None, executor.log_text()
    assert executor.status.safety_interventions > last.safety_interventions, (
        "the new step limit never acted"
    )
    commands = [c for c in robot.commands("/param_arm/commands") if c["t"] > applied_at + 0.2]
    steps = np.abs(np.diff([c["values"] for c in commands], axis=0))
    assert len(commands) >= 30 and steps.max() <= MAX_STEP + 1e-9, (len(commands), steps.max())
