"""Which LeRobot policy families can be served, how, and in which dtypes.

Invariant: a policy that keeps state between calls (observation history,
select_action queues) is never shared between robots — it would mix their
observations. Families not listed are refused at start-up with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Model dtypes a server can run in (torch dtype names).
DTYPES = ("float32", "float16", "bfloat16")

SHARED = "shared"
EXCLUSIVE = "exclusive"

# Chunk-stateless with one observation step: one model serves many sessions.
_SHARED_FAMILIES = frozenset({"act", "pi0", "pi05", "smolvla", "groot"})
# Shared families whose requests can share one forward pass with each request's
# chunk unchanged: ACT is deterministic; the flow-matching ones take each
# request's noise (drawn from its seed) and per-request RTC inputs
# (server/batched_rtc.py). GR00T draws its own noise and takes one RTC delay.
_BATCHED_FAMILIES = frozenset({"act", "pi0", "pi05", "smolvla"})
# Keep observation history between calls: one session at a time.
_EXCLUSIVE_FAMILIES = frozenset({"diffusion"})


class UnsupportedPolicyError(ValueError):
    """The checkpoint's policy family cannot be served."""


@dataclass(frozen=True)
class ServingClass:
    mode: str
    reason: str


def classify(policy_type: str, n_obs_steps: int = 1) -> ServingClass:
    if policy_type in _SHARED_FAMILIES:
        if n_obs_steps > 1:
            return ServingClass(EXCLUSIVE, f"{policy_type} with n_obs_steps={n_obs_steps} keeps observation history")
        return ServingClass(SHARED, f"{policy_type} predicts each chunk from one observation")
    if policy_type in _EXCLUSIVE_FAMILIES:
        return ServingClass(EXCLUSIVE, f"{policy_type} keeps observation history between calls")
    supported = sorted(_SHARED_FAMILIES | _EXCLUSIVE_FAMILIES)
    raise UnsupportedPolicyError(
        f"policy type {policy_type!r} cannot be served: it has no action-chunk API this server drives; "
        f"supported types are {supported}"
    )


def batches_across_sessions(policy_type: str) -> bool:
    """Whether several sessions' requests may share one forward pass (shared mode only)."""
    return policy_type in _BATCHED_FAMILIES


def resolve_serving(serving: ServingClass, requested: str) -> ServingClass:
    """Apply the operator's serving_mode (auto, shared, exclusive) to the registry's class.

    Forcing exclusive is always safe (one robot at a time). Forcing shared on
    a family that keeps state between calls would mix robots: refused.
    """
    if requested in ("", "auto") or requested == serving.mode:
        return serving
    if requested == EXCLUSIVE:
        return ServingClass(EXCLUSIVE, f"forced by serving_mode=exclusive ({serving.reason})")
    if requested == SHARED:
        raise UnsupportedPolicyError(
            f"serving_mode=shared is unsafe here: {serving.reason}, so one model instance would mix "
            "robots' observations; use serving_mode auto or exclusive"
        )
    raise UnsupportedPolicyError(f"serving_mode {requested!r} is not one of ['auto', 'shared', 'exclusive']")
