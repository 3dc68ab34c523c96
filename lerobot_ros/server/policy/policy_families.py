"""Which LeRobot policy families can be served, how, and in which dtypes: one record per family.

Invariant: a policy that keeps state between calls (observation history,
select_action queues) is never shared between robots — it would mix their
observations. Families not listed are refused at start-up with the reason.
Everything the server decides by policy type is read from ``FAMILIES``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Model dtypes a server can run in (torch dtype names).
DTYPES = ("float32", "float16", "bfloat16")

SHARED = "shared"
EXCLUSIVE = "exclusive"


@dataclass(frozen=True)
class PolicyFamily:
    """How the server serves one LeRobot policy type."""

    policy_type: str
    # One model serves many sessions: chunk-stateless with one observation step (else exclusive:
    # one session).
    shared: bool
    # Several sessions' requests can share one forward pass, each chunk unchanged: ACT is
    # deterministic; the flow-matching ones take each request's noise and per-request RTC inputs
    # (batched_rtc.py).
    batchable: bool
    # Real-time chunking where the loaded policy declares it (checkpoint.supports_rtc has the last
    # word).
    rtc: bool
    # Flow-matching noise is drawn per request (its own generator) and passed to the forward as
    # ``noise``; without it the policy draws its own randomness inside the forward (seeded there,
    # one request at a time).
    noise_input: bool
    # Keeps observations between calls (Diffusion's queues): fed by the server, never shared.
    observation_history: bool


FAMILIES: dict[str, PolicyFamily] = {
    family.policy_type: family
    for family in (
        PolicyFamily(
            "act",
            shared=True,
            batchable=True,
            rtc=False,
            noise_input=False,
            observation_history=False,
        ),
        PolicyFamily(
            "pi0",
            shared=True,
            batchable=True,
            rtc=True,
            noise_input=True,
            observation_history=False,
        ),
        PolicyFamily(
            "pi05",
            shared=True,
            batchable=True,
            rtc=True,
            noise_input=True,
            observation_history=False,
        ),
        PolicyFamily(
            "smolvla",
            shared=True,
            batchable=True,
            rtc=True,
            noise_input=True,
            observation_history=False,
        ),
        # GR00T draws its own noise and takes one RTC delay for the whole batch: it runs alone.
        PolicyFamily(
            "groot",
            shared=True,
            batchable=False,
            rtc=True,
            noise_input=False,
            observation_history=False,
        ),
        PolicyFamily(
            "diffusion",
            shared=False,
            batchable=False,
            rtc=False,
            noise_input=False,
            observation_history=True,
        ),
    )
}


class UnsupportedPolicyError(ValueError):
    """The checkpoint's policy family cannot be served."""


@dataclass(frozen=True)
class ServingClass:
    mode: str
    reason: str


def family_of(policy_type: str) -> PolicyFamily:
    """The family record of ``policy_type``; UnsupportedPolicyError naming the supported ones
    otherwise."""
    family = FAMILIES.get(policy_type)
    if family is None:
        raise UnsupportedPolicyError(
            f"policy type {policy_type!r} cannot be served: it has no action-chunk API this "
            "server drives; "
            f"supported types are {sorted(FAMILIES)}"
        )
    return family


def classify(policy_type: str, n_obs_steps: int = 1) -> ServingClass:
    family = family_of(policy_type)
    if not family.shared:
        return ServingClass(EXCLUSIVE, f"{policy_type} keeps observation history between calls")
    if n_obs_steps > 1:
        return ServingClass(
            EXCLUSIVE, f"{policy_type} with n_obs_steps={n_obs_steps} keeps observation history"
        )
    return ServingClass(SHARED, f"{policy_type} predicts each chunk from one observation")


def batches_across_sessions(policy_type: str) -> bool:
    """Whether several sessions' requests may share one forward pass (shared mode only)."""
    return policy_type in FAMILIES and FAMILIES[policy_type].batchable


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
            f"serving_mode=shared is unsafe here: {serving.reason}, so one model instance would "
            "mix "
            "robots' observations; use serving_mode auto or exclusive"
        )
    raise UnsupportedPolicyError(
        f"serving_mode {requested!r} is not one of ['auto', 'shared', 'exclusive']"
    )
