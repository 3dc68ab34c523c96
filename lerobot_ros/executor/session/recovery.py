"""The way back from OFFLINE (and, by the operator's hand, from DEAD): one explicit resume.

Invariants:

* motion restarts only through ``resume`` (~/resume, a new RunPolicy goal,
  lifecycle activate) or the fail-safe's ``auto_resume``: a session opening
  by itself only ends the search;
* a resume with no session open tries one handshake first, under the core's
  ``handshaking`` lock, so it never runs beside the worker's re-handshake;
  without a ready server it fails with the reason the server gave (or that
  none answered), and changes nothing: the executor keeps holding;
* from DEAD it is one handshake again: a server still serving another model
  is refused again, and the executor stays DEAD.

Plain Python: the caller passes its handshake as a function, so tests drive
this with a fake link and a fake clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lerobot_ros.executor.session.handshake import HandshakeResult


class Recoverable(Protocol):
    """The core's verbs a resume uses (``core.ExecutorCore``)."""

    handshaking: object  # a lock

    @property
    def offline(self) -> tuple[bool, bool]: ...

    def revive(self, now_s: float, by: str) -> None: ...

    def resume_offline(self, now_s: float, by: str) -> str | None: ...


def resume(
    core: Recoverable,
    run_handshake: Callable[[], HandshakeResult],
    clock: Callable[[], float],
    by: str,
) -> str | None:
    """Restart motion from OFFLINE or DEAD (``by``: who asks); None when done or nothing was held,
    else why not."""
    offline, _ = core.offline
    if not offline:
        return None
    with core.handshaking:
        core.revive(clock(), by)
        offline, session = core.offline
        if offline and not session:
            result = run_handshake()
            if not result.accepted:
                return f"no ready server takes the robot: {result.reason}"
            offline, session = core.offline
        if not offline:
            return None  # auto_resume restarted it when the session opened
        return core.resume_offline(clock(), by)
