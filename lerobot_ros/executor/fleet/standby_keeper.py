"""Keeps the robot's warm standby session armed (``hedging.py``: what a standby is for).

Invariants:

* at most one standby, never on the replica serving the robot, always on a
  ready replica serving the validated model (``replicas.choose``, the
  placement's rules: least loaded first, full, draining or other-model
  replicas skipped with the reason);
* opening one never delays a request or a control tick: it runs on a thread
  of its own, and the core decides under its lock whether a grant is still
  wanted (the session may have moved onto that replica meanwhile: then the
  grant is closed again);
* a standby that saw a hedged request the serving replica answered first
  was made an ordinary session by its server: it is opened again as a
  standby on the same replica (the re-open presents its secret);
* after a failed try the next waits (``failover.STANDBY_RETRY_S``); the reason
  is in ``~/status`` (``CoreSnapshot.standby_problem``) and the log.

Plain Python: the ROS calls go through the ``SessionOpener`` of the
handshake (with ``standby=True``), so tests drive it with a fake fleet.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from lerobot_ros.executor.fleet.replicas import choose
from lerobot_ros.executor.session.handshake import SessionOpener
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, SessionGrant

#: How often the keeper looks whether a standby is wanted (seconds); a promotion wakes it at once.
KEEPER_PERIOD_S = 0.25


class StandbyTarget(Protocol):
    """What the keeper reads from and reports to the executor core."""

    settings: object

    @property
    def identity(self): ...

    @property
    def unanswered_replicas(self) -> frozenset[str]: ...

    def standby_wanted(self, now_s: float) -> str | None: ...

    def standby_opened(
        self, grant: SessionGrant, instance_id: str, replica: str, now_s: float
    ) -> bool: ...

    def standby_failed(self, reason: str, now_s: float) -> None: ...

    def check_model(self, capabilities, now_s: float) -> str | None: ...


class StandbyLink(SessionOpener, Protocol):
    def open_standby(
        self, namespace: str, timeout_s: float, check: Callable[[SessionGrant], str | None]
    ) -> SessionGrant | str: ...

    def close_session_at(self, namespace: str, session_id: str) -> None: ...


def arm_standby(
    core: StandbyTarget, link: StandbyLink, robot: RobotDeclaration, clock: Callable[[], float]
) -> str:
    """One try at arming a standby when one is wanted; what happened ("" when none was wanted)."""
    wanted = core.standby_wanted(clock())
    if wanted is None:
        return ""
    settings, identity = core.settings, core.identity
    if wanted:  # re-arm the used one where it is
        candidates = [(wanted, None)]
        skipped = ()
    else:
        others = [namespace for namespace in link.namespaces if namespace != identity.replica]
        if not others:
            core.standby_failed("no other replica known for a standby", clock())
            return "no other replica known"
        views = link.get_statuses(others, settings.replica_status_timeout_s)
        placement = choose(views, robot, identity.model, "", core.unanswered_replicas)
        candidates = list(placement.candidates)
        skipped = placement.skipped
    tried = []
    for namespace, view in candidates:
        grant = link.open_standby(
            namespace,
            settings.replica_status_timeout_s + 2.0,
            check=lambda offered: core.check_model(offered.capabilities, clock()),
        )
        if isinstance(grant, SessionGrant):
            instance_id = view.instance_id if view is not None else ""  # re-armed: the one it had
            if core.standby_opened(grant, instance_id, namespace, clock()):
                return f"standby session opened on {namespace}"
            link.close_session_at(namespace, grant.session_id)
            return f"standby on {namespace} no longer wanted (the session moved there): closed"
        tried.append(f"{namespace}: {grant}")
    reason = (
        "no replica for a standby: " + "; ".join(tried + [str(each) for each in skipped])
        if tried or skipped
        else "no other ready replica of the model for a standby"
    )
    core.standby_failed(reason, clock())
    return reason


class StandbyKeeper(threading.Thread):
    """Runs ``arm_standby`` whenever the core wants a standby, until ``stop``."""

    def __init__(
        self,
        core: StandbyTarget,
        link: StandbyLink,
        robot: RobotDeclaration,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = lambda text: None,
    ) -> None:
        super().__init__(name="lerobot_ros_standby_keeper", daemon=True)
        self.core, self.link, self.robot, self.clock, self.log = core, link, robot, clock, log
        self._stop_event = threading.Event()
        self._last = ""

    def stop(self) -> None:
        self._stop_event.set()

    def run(self) -> None:
        while not self._stop_event.wait(KEEPER_PERIOD_S):
            try:
                outcome = arm_standby(self.core, self.link, self.robot, self.clock)
            except Exception as error:  # noqa: BLE001 - a failed try must not end the keeper
                outcome = f"standby try failed: {type(error).__name__}: {error}"
                self.core.standby_failed(outcome, self.clock())
            if outcome and outcome != self._last:
                self.log(outcome)
            if outcome:
                self._last = outcome
