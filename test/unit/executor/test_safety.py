"""The safety envelope: finite values, joint limits, bounded steps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lerobot_ros.executor.control.safety import SafetyEnvelope

JOINTS = ("shoulder", "elbow", "wrist")


def envelope(max_step=0.1, reject_non_finite=True) -> SafetyEnvelope:
    return SafetyEnvelope(
        lower=np.array([-1.0, -2.0, np.nan]),
        upper=np.array([1.0, np.inf, np.nan]),
        max_step=max_step,
        reject_non_finite=reject_non_finite,
        joint_names=JOINTS,
    )


def test_a_safe_action_passes_untouched():
    result = envelope().apply(np.array([0.5, 0.0, 10.0]), reference=np.array([0.45, 0.05, 9.95]))
    np.testing.assert_allclose(result.action, [0.5, 0.0, 10.0])
    assert not result.intervened and result.reasons == ()


def test_actions_are_clamped_to_the_joint_limits_and_nan_or_inf_bounds_mean_no_limit():
    result = envelope(max_step=0).apply(np.array([1.7, -3.0, 1e6]), reference=None)
    np.testing.assert_allclose(result.action, [1.0, -2.0, 1e6])
    assert result.intervened
    assert len(result.reasons) == 2
    assert "joint 'shoulder'" in result.reasons[1] and "above upper limit 1" in result.reasons[1]
    assert "joint 'elbow'" in result.reasons[0] and "below lower limit -2" in result.reasons[0]


def test_each_joint_moves_at_most_max_step_from_the_reference():
    safety = SafetyEnvelope(
        np.full(3, -np.inf),
        np.full(3, np.inf),
        max_step=np.array([0.1, 0.5, 0.0]),
        joint_names=JOINTS,
    )
    result = safety.apply(np.array([0.5, -0.9, 7.0]), reference=np.array([0.0, 0.0, 0.0]))
    # wrist: max_step 0 = no step limit
    np.testing.assert_allclose(result.action, [0.1, -0.5, 7.0])
    assert result.intervened
    assert [reason.split(":")[0] for reason in result.reasons] == [
        "joint 'shoulder'",
        "joint 'elbow'",
    ]
    assert "exceeds max_step 0.1" in result.reasons[0]


def test_without_a_reference_only_the_limits_apply():
    result = envelope().apply(np.array([0.9, 5.0, -5.0]), reference=None)
    np.testing.assert_allclose(result.action, [0.9, 5.0, -5.0])
    assert not result.intervened


def test_a_reference_outside_the_limits_moves_back_by_at_most_max_step():
    # Clamping to 1.0 would jump 0.5; the step limit applies last, so it moves 0.1 toward the
    # range.
    result = envelope().apply(np.array([3.0, 0.0, 0.0]), reference=np.array([1.5, 0.0, 0.0]))
    np.testing.assert_allclose(result.action, [1.4, 0.0, 0.0])
    assert result.intervened


def test_a_non_finite_action_holds_the_reference_position():
    reference = np.array([0.2, 0.3, 0.4])
    result = envelope().apply(np.array([0.0, np.nan, np.inf]), reference=reference)
    np.testing.assert_allclose(result.action, reference)
    assert result.intervened
    assert "'elbow'=nan" in result.reasons[0] and "'wrist'=inf" in result.reasons[0]
    assert "'shoulder'" not in result.reasons[0]
    assert result.action is not reference


@pytest.mark.parametrize("reference", [None, np.array([0.0, math.nan, 0.0])])
def test_a_non_finite_action_without_a_finite_reference_is_not_published(reference):
    result = envelope().apply(np.array([np.nan, 0.0, 0.0]), reference=reference)
    assert result.action is None
    assert result.intervened
    assert "not published" in result.reasons[0]


def test_non_finite_values_pass_only_when_rejection_is_turned_off():
    result = envelope(reject_non_finite=False).apply(
        np.array([np.nan, 0.0, 0.0]), reference=np.zeros(3)
    )
    assert math.isnan(result.action[0])
    np.testing.assert_allclose(result.action[1:], [0.0, 0.0])


def test_a_reference_joint_of_unknown_position_is_not_step_limited():
    result = envelope().apply(np.array([0.9, 0.9, 0.9]), reference=np.array([np.nan, 0.0, 0.0]))
    np.testing.assert_allclose(result.action, [0.9, 0.1, 0.1])


def test_the_callers_action_is_never_modified():
    action = np.array([5.0, 0.0, 0.0])
    envelope().apply(action, reference=np.zeros(3))
    np.testing.assert_array_equal(action, [5.0, 0.0, 0.0])


def test_from_parameters_empty_lists_mean_no_limits():
    safety = SafetyEnvelope.from_parameters(JOINTS, [], [], max_step=0.0)
    result = safety.apply(np.array([100.0, -100.0, 3.0]), reference=np.zeros(3))
    np.testing.assert_allclose(result.action, [100.0, -100.0, 3.0])
    assert not result.intervened
    assert safety.joint_names == JOINTS and safety.action_dim == 3


def test_from_parameters_builds_per_joint_limits_and_steps():
    safety = SafetyEnvelope.from_parameters(
        JOINTS, [-1, -1, -1], [1, 1, 1], max_step=[0.1, 0.2, math.inf]
    )
    result = safety.apply(np.array([2.0, 2.0, 2.0]), reference=np.zeros(3))
    np.testing.assert_allclose(result.action, [0.1, 0.2, 1.0])


@pytest.mark.parametrize(
    ("lower", "upper", "max_step", "message"),
    [
        ([0.0, 0.0], [], 0.1, "lower must be empty or hold 3 values .*, got 2"),
        ([], [1.0] * 4, 0.1, "upper must be empty or hold 3 values .*, got 4"),
        ([], [], [0.1], "max_step must be empty or hold 3 values .*, got 1"),
    ],
)
def test_from_parameters_wrong_lengths_name_expected_and_got(lower, upper, max_step, message):
    with pytest.raises(ValueError, match=message):
        SafetyEnvelope.from_parameters(JOINTS, lower, upper, max_step)


def test_inconsistent_construction_is_refused():
    with pytest.raises(
        ValueError,
        match="joint 'elbow': lower limit must be <= upper limit, got lower 2.0 > upper 1.0",
    ):
        SafetyEnvelope.from_parameters(JOINTS, [0, 2, 0], [1, 1, 1], 0.1)
    with pytest.raises(ValueError, match=r"same length >= 1, got shapes \(2,\) and \(3,\)"):
        SafetyEnvelope(np.zeros(2), np.zeros(3), 0.1)
    with pytest.raises(ValueError, match="expected 3 joint names .*, got 2"):
        SafetyEnvelope(np.zeros(3), np.ones(3), 0.1, joint_names=("a", "b"))
    with pytest.raises(ValueError, match=r"hold 3 values .*, got shape \(2,\)"):
        SafetyEnvelope(np.zeros(3), np.ones(3), np.ones(2))


def test_an_action_of_the_wrong_length_is_a_caller_error():
    with pytest.raises(ValueError, match=r"action must have shape \(3,\) .*, got \(4,\)"):
        envelope().apply(np.zeros(4), reference=None)
    with pytest.raises(ValueError, match=r"reference must have shape \(3,\) .*, got \(2,\)"):
        envelope().apply(np.zeros(3), reference=np.zeros(2))
