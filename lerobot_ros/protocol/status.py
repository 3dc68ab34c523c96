"""The executor's states and a RunPolicy goal's terminations, as the wire names them.

Invariant: these values are the constants of ``msg/ExecutorStatus.msg`` and
``action/RunPolicy.action`` (checked by ``test/unit/shared/test_control_plane.py``),
so the executor, the recorder and any client read a status the same way.
"""

from __future__ import annotations

from enum import Enum, IntEnum


class ExecutorState(IntEnum):
    """Values match the STATE_* constants of msg/ExecutorStatus.msg."""

    CONNECTING = 0
    STREAMING = 1
    DEGRADED = 2
    STALLED = 3
    RECONNECTING = 4
    DEAD = 5
    OFFLINE = 6


class Termination(str, Enum):
    """Values match RunPolicy.Result's TERMINATION_* constants."""

    COMPLETED = "completed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    FAILED = "failed"
    DEAD = "dead"
