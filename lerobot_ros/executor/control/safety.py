"""The last check between the policy (or the fallback) and the robot's motors.

Invariant: nothing published to the robot is non-finite (unless the operator
turned ``reject_non_finite`` off), outside the joint limits, or more than
``max_step`` away from the reference position (the last commanded or current
measured position) — with one exception that is itself safe: when the
reference lies outside the limits, the command moves from it toward the
limits by at most ``max_step`` rather than jumping onto them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SafetyResult:
    """Outcome of one ``SafetyEnvelope.apply``.

    ``action`` is what to publish; None means "publish nothing" (the action was
    not finite and no reference position was known to hold instead).
    ``reasons`` name each joint the envelope changed and why.
    """

    action: np.ndarray | None
    intervened: bool
    reasons: tuple[str, ...] = ()


class SafetyEnvelope:
    """Joint limits, per-step motion limit and finiteness check for one robot.

    Non-finite bounds (NaN or +-inf) mean "no limit" on that side of that
    joint; a ``max_step`` that is <= 0, NaN or inf means "no step limit".
    """

    def __init__(
        self,
        lower: np.ndarray,
        upper: np.ndarray,
        max_step: np.ndarray | float,
        reject_non_finite: bool = True,
        joint_names: Sequence[str] | None = None,
    ) -> None:
        lower = np.array(lower, dtype=np.float64)
        upper = np.array(upper, dtype=np.float64)
        if lower.ndim != 1 or lower.shape != upper.shape or lower.size == 0:
            raise ValueError(
                "lower and upper must be 1-D arrays of the same length >= 1, got shapes "
                f"{lower.shape} and {upper.shape}"
            )
        dim = lower.size
        self._lower = np.where(np.isfinite(lower), lower, -np.inf)
        self._upper = np.where(np.isfinite(upper), upper, np.inf)
        step = np.array(max_step, dtype=np.float64)
        if step.ndim == 0:
            step = np.full(dim, float(step))
        if step.shape != (dim,):
            raise ValueError(
                f"max_step must be a number or hold {dim} values (one per joint), got shape "
                f"{step.shape}"
            )
        self._max_step = np.where(np.isfinite(step) & (step > 0), step, np.inf)
        if joint_names is None:
            joint_names = tuple(f"joint[{i}]" for i in range(dim))
        if len(joint_names) != dim:
            raise ValueError(f"expected {dim} joint names (one per limit), got {len(joint_names)}")
        self._joint_names = tuple(joint_names)
        crossed = np.flatnonzero(self._lower > self._upper)
        if crossed.size:
            i = int(crossed[0])
            raise ValueError(
                f"joint '{self._joint_names[i]}': lower limit must be <= upper limit, "
                f"got lower {self._lower[i]} > upper {self._upper[i]}"
            )
        self._reject_non_finite = bool(reject_non_finite)

    @classmethod
    def from_parameters(
        cls,
        joint_names: Sequence[str],
        lower_list: Sequence[float],
        upper_list: Sequence[float],
        max_step: float | Sequence[float],
        reject_non_finite: bool = True,
    ) -> SafetyEnvelope:
        """Build from node parameters: an empty list means "no limits" for that side."""
        dim = len(joint_names)
        if dim == 0:
            raise ValueError("joint_names must name at least one joint, got an empty list")

        def per_joint(name: str, values: Sequence[float], empty_means: float) -> np.ndarray:
            if len(values) == 0:
                return np.full(dim, empty_means)
            if len(values) != dim:
                raise ValueError(
                    f"{name} must be empty or hold {dim} values (one per joint), got {len(values)}"
                )
            return np.array(values, dtype=np.float64)

        if isinstance(max_step, (int, float)):
            step = float(max_step)
        else:
            step = per_joint("max_step", max_step, np.inf)
        return cls(
            per_joint("lower", lower_list, -np.inf),
            per_joint("upper", upper_list, np.inf),
            step,
            reject_non_finite=reject_non_finite,
            joint_names=joint_names,
        )

    @property
    def action_dim(self) -> int:
        return self._lower.size

    @property
    def joint_names(self) -> tuple[str, ...]:
        return self._joint_names

    def apply(self, action: np.ndarray, reference: np.ndarray | None) -> SafetyResult:
        """Make ``action`` safe to publish, relative to ``reference`` (None: unknown).

        Order: finiteness (a non-finite action is replaced as a whole by the
        reference, i.e. hold), then joint limits, then the step limit
        (applied last so no command ever jumps more than ``max_step``).
        """
        proposed = self._as_vector("action", action)
        ref = None if reference is None else self._as_vector("reference", reference)
        reasons: list[str] = []

        bad = np.flatnonzero(~np.isfinite(proposed))
        if bad.size and self._reject_non_finite:
            names = ", ".join(f"'{self._joint_names[i]}'={proposed[i]}" for i in bad)
            if ref is None or not np.all(np.isfinite(ref)):
                reason = (
                    f"non-finite action at {names} and no finite reference to hold: not published"
                )
                return SafetyResult(None, True, (reason,))
            # One non-finite joint means the whole chunk is suspect: hold every
            # joint where it is. Holding the reference never moves the robot,
            # so it is not clamped (clamping a reference outside the limits
            # would make the robot jump).
            return SafetyResult(
                ref.copy(),
                True,
                (f"non-finite action at {names}: holding the reference position",),
            )

        safe = proposed.copy()
        with np.errstate(invalid="ignore"):  # NaN passes through when reject_non_finite is off
            below = np.flatnonzero(safe < self._lower)
            above = np.flatnonzero(safe > self._upper)
        for i in below:
            reasons.append(
                f"joint '{self._joint_names[i]}': {safe[i]:.6g} below lower limit "
                f"{self._lower[i]:.6g}"
            )
        for i in above:
            reasons.append(
                f"joint '{self._joint_names[i]}': {safe[i]:.6g} above upper limit "
                f"{self._upper[i]:.6g}"
            )
        safe[below] = self._lower[below]
        safe[above] = self._upper[above]

        if ref is not None:
            # A joint whose reference is unknown (non-finite) cannot be step-limited.
            limited = np.isfinite(self._max_step) & np.isfinite(ref)
            with np.errstate(invalid="ignore"):
                too_far = np.flatnonzero(limited & (np.abs(safe - ref) > self._max_step))
            for i in too_far:
                target = ref[i] + np.sign(safe[i] - ref[i]) * self._max_step[i]
                reasons.append(
                    f"joint '{self._joint_names[i]}': step {safe[i] - ref[i]:+.6g} from reference "
                    f"{ref[i]:.6g} "
                    f"exceeds max_step {self._max_step[i]:.6g}, limited to {target:.6g}"
                )
                safe[i] = target

        return SafetyResult(safe, bool(reasons), tuple(reasons))

    def _as_vector(self, name: str, values: np.ndarray) -> np.ndarray:
        vector = np.asarray(values, dtype=np.float64)
        if vector.shape != (self.action_dim,):
            raise ValueError(
                f"{name} must have shape ({self.action_dim},) (one value per joint), got "
                f"{vector.shape}"
            )
        return vector
