"""The fail-safe's configuration and its fallback action: plain values the state machine and the
settings share.

Split from ``state_machine.py`` (which re-exports every name) so the table of
timeouts and the fallback rule read on their own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

FALLBACK_MODES = ("hold", "repeat_last", "zero")


@dataclass(frozen=True, kw_only=True)
class FailSafeConfig:
    """Timeouts of the state machine, in seconds (``math.inf`` disables one)."""

    degraded_after_s: float  # no chunk merged for this long (queue non-empty) -> DEGRADED
    max_action_age_s: float  # never execute an action whose source observation is older
    max_offline_s: (
        float  # no chunk merged for this long (accepted re-handshakes do not count) -> OFFLINE
    )
    timeout_streak_to_reconnect: int = 2  # request timeouts in a row -> RECONNECTING
    heartbeat_timeout_s: float  # server heartbeat silent this long -> RECONNECTING
    reconnect_backoff_initial_s: float  # wait before the first re-handshake attempt
    reconnect_backoff_max_s: float  # cap of the doubling wait between attempts
    # several replicas: re-handshake at once after a working session was lost
    move_at_once: bool = False
    # OFFLINE: restart motion as soon as a session opens (no explicit resume)
    auto_resume: bool = False

    def __post_init__(self) -> None:
        for name in (
            "degraded_after_s",
            "max_action_age_s",
            "max_offline_s",
            "heartbeat_timeout_s",
            "reconnect_backoff_initial_s",
            "reconnect_backoff_max_s",
        ):
            value = getattr(self, name)
            if math.isnan(value) or value <= 0:
                raise ValueError(f"{name} must be > 0 seconds (math.inf disables it), got {value}")
        if self.timeout_streak_to_reconnect < 1:
            raise ValueError(
                f"timeout_streak_to_reconnect must be >= 1, got {self.timeout_streak_to_reconnect}"
            )
        problem = backoff_problem(self.reconnect_backoff_initial_s, self.reconnect_backoff_max_s)
        if problem:
            raise ValueError(problem)


def backoff_problem(initial_s: float, max_s: float) -> str | None:
    """Why a reconnect backoff cannot start at ``initial_s`` and double up to ``max_s``, or None.

    The one owner of the rule: FailSafeConfig enforces it, and the executor's
    parameter validation reports it with the other problems.
    """
    if initial_s > max_s:
        return (
            f"reconnect_backoff_initial_s must be <= reconnect_backoff_max_s, got {initial_s} "
            f"> {max_s}"
        )
    return None


def fallback_action(
    mode: str,
    last_commanded: np.ndarray | None,
    measured: np.ndarray | None,
    action_dim: int,
) -> np.ndarray | None:
    """The action to publish instead of a policy action; None: nothing usable.

    "hold": the measured position, else the last commanded one;
    "repeat_last": the last commanded action, else the measured position;
    "zero": zeros (for velocity/effort interfaces, where zero means stop).
    A candidate with the wrong length is a caller bug (ValueError); one with
    non-finite values is unusable and the next candidate is tried.
    """
    if mode not in FALLBACK_MODES:
        raise ValueError(f"fallback mode must be one of {', '.join(FALLBACK_MODES)}, got {mode!r}")
    if action_dim < 1:
        raise ValueError(f"action_dim must be >= 1, got {action_dim}")
    if mode == "zero":
        return np.zeros(action_dim, dtype=np.float64)
    measured_first = (("measured", measured), ("last_commanded", last_commanded))
    candidates = measured_first if mode == "hold" else measured_first[::-1]
    for name, candidate in candidates:
        if candidate is None:
            continue
        vector = np.array(candidate, dtype=np.float64)
        if vector.shape != (action_dim,):
            raise ValueError(f"{name} must have shape ({action_dim},), got {vector.shape}")
        if np.all(np.isfinite(vector)):
            return vector
    return None
