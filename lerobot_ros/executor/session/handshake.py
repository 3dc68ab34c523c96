"""The executor's handshake with a policy server: at start-up and on every re-handshake.

Invariants:

* the robot never moves unless the server it will take actions from serves
  a policy whose contract (ordered action names, cameras, state dimension)
  matches this robot; otherwise the node stops with the reason;
* every re-handshake checks the server's model against the FIRST one, in its
  GetStatus and again in the session it grants, before the data plane is
  built: a different model is never executed (one server: DEAD; a fleet:
  that replica is skipped and reported, see ``replicas.py``);
* with several replicas, every handshake is a placement: all are asked for
  their status at once, in one round bounded by ``replica_status_timeout_s``
  (the replica being left in a second round, only when no other takes the
  robot), and sessions are tried on the candidates ``replicas.choose`` ranks
  until one is granted, so a refusal for capacity or drain moves on to the
  next replica at once. Discovered replicas (``server_namespaces: [auto]``)
  are read from the link at every placement, so a server that joined after
  start-up is a candidate of the next move.

Plain Python: the ROS calls go through a ``SessionOpener`` (the session
clients, or a fake in tests); the outcome is reported to the executor core
through ``PlacementTarget``, so this module never imports the core.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lerobot_ros.executor.fleet.replicas import NOT_READY, Placement, choose
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView, SessionGrant
from lerobot_ros.executor.session.session_state import SessionIdentity
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.status import ExecutorState


class SessionOpener(Protocol):
    """What the handshake needs from ROS, per replica namespace (in ``namespaces``: the configured
    order, or the replicas discovery knows now, read afresh by every placement).

    Each call is bounded by ``timeout_s``; errors are returned as text.
    """

    namespaces: tuple[str, ...]
    discovers: bool  # the replicas are found on the graph (server_namespaces [auto])

    def get_statuses(
        self, namespaces: tuple[str, ...] | list[str], timeout_s: float
    ) -> list[tuple[str, ServerView | str]]:
        """Every one of ``namespaces`` asked at once (``status_round.ask_all``), the round bounded
        by ``timeout_s``."""

    def wait_for_discovery(self, timeout_s: float) -> None:
        """Return once every replica's services are known to this process (discovering: once some
        replica is and the set stopped changing), or after ``timeout_s``."""

    def open_session(
        self, namespace: str, timeout_s: float, check: Callable[[SessionGrant], str | None]
    ) -> SessionGrant | str:
        """Open a session there; ``check`` vets the grant before its data plane is built and
        matched."""


class PlacementTarget(Protocol):
    """What the handshake reads from the executor core and reports to it
    (``core.ExecutorCore``)."""

    settings: ExecutorSettings

    @property
    def identity(self) -> SessionIdentity: ...

    @property
    def state(self) -> ExecutorState: ...

    @property
    def unanswered_replicas(self) -> frozenset[str]: ...

    def check_model(self, capabilities: ServerCapabilities, now_s: float) -> str | None: ...

    def session_opened(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str = ""
    ) -> None: ...

    def handshake_failed(self, reason: str, now_s: float) -> None: ...

    def replicas_skipped(self, skipped: tuple[str, ...]) -> None: ...


@dataclass(frozen=True)
class HandshakeResult:
    accepted: bool
    reason: str
    server_instance_id: str = ""
    model_fingerprint: str = ""
    policy_type: str = ""

    def as_dict(self) -> dict:
        return {
            "handshake": "accepted" if self.accepted else "refused",
            "reason": self.reason,
            "server_instance_id": self.server_instance_id,
            "model_fingerprint": self.model_fingerprint,
            "policy_type": self.policy_type,
        }


def check_server(
    robot: RobotDeclaration, capabilities: ServerCapabilities, server_ready: bool, instance_id: str
) -> HandshakeResult:
    """``handshake_only``'s verdict: the server is ready and its policy's contract matches the
    robot."""
    identity = dict(
        server_instance_id=instance_id,
        model_fingerprint=capabilities.model_fingerprint,
        policy_type=capabilities.policy_type,
    )
    if not server_ready:
        return HandshakeResult(False, NOT_READY, **identity)
    check = robot.check_against(capabilities)
    if not check.ok:
        return HandshakeResult(False, check.message(), **identity)
    return HandshakeResult(True, "robot matches the policy contract", **identity)


#: How often the start-up handshake asks again while a replica has not answered yet (seconds).
START_RETRY_S = 0.5


def handshake(
    core: PlacementTarget, link: SessionOpener, robot: RobotDeclaration, clock: Callable[[], float]
) -> HandshakeResult:
    """Place the robot: GetStatus of the replicas, contract and model checks, OpenSession and its
    data plane.

    Used for the first handshake (at start-up) and every re-handshake or move;
    reports the outcome to the core. At start-up, while some replica has not
    answered (its server may still be loading), every replica is asked again
    until ``handshake_timeout_s`` has passed, each call bounded by
    ``replica_status_timeout_s``: a server that comes up late is found without
    waiting on one that never does. A refusal from a server that answered is final.

    The first placement of a fleet waits for all replicas to be discovered
    together first (at most what asking each in turn could cost): a fresh
    process learns of the servers one by one, and a replica not yet known
    would be skipped for a later one in the list that is. Discovering
    replicas, it waits (at most ``handshake_timeout_s``) until some server is
    found and the set stops changing.
    """
    settings = core.settings
    first = core.identity.model is None
    deadline = time.monotonic() + settings.handshake_timeout_s
    if first and link.discovers:
        link.wait_for_discovery(settings.handshake_timeout_s)
    elif first and len(link.namespaces) > 1:
        link.wait_for_discovery(
            min(
                settings.handshake_timeout_s,
                settings.replica_status_timeout_s * len(link.namespaces),
            )
        )
    while True:
        remaining = deadline - time.monotonic()
        status_timeout = (
            min(settings.replica_status_timeout_s, max(remaining, 0.0))
            if first
            else settings.replica_status_timeout_s
        )
        outcome = _place_once(core, link, robot, clock, status_timeout)
        if isinstance(outcome, HandshakeResult):
            return outcome
        placement, tried, unanswered = outcome
        if not (first and unanswered and time.monotonic() + START_RETRY_S < deadline):
            return _failed(core, link, placement, tried, clock)
        time.sleep(START_RETRY_S)


def _place_once(
    core: PlacementTarget,
    link: SessionOpener,
    robot: RobotDeclaration,
    clock: Callable[[], float],
    status_timeout: float,
) -> HandshakeResult | tuple[Placement, list, bool]:
    """One placement: a final result (a session, or DEAD), or what failed and whether a replica did
    not answer.

    The replica being left is asked only when no other one takes the robot:
    it would rank last anyway, and a killed one answers nothing (an
    unanswered round costs ``replica_status_timeout_s``). No replica known
    (discovery found none yet) counts as unanswered, so a start-up waits.
    """
    settings, identity = core.settings, core.identity
    rounds = [[namespace for namespace in link.namespaces if namespace != identity.replica]]
    if identity.replica:
        rounds.append([identity.replica])
    views: list[tuple[str, ServerView | str]] = []
    tried: list[tuple[str, str, ServerView]] = []  # (namespace, why no session, its view)
    offered_fingerprints = []

    def check_offered(offered: SessionGrant) -> str | None:
        # The session's capabilities are what the server validated us against: check them too.
        offered_fingerprints.append(offered.capabilities.model_fingerprint)
        return core.check_model(offered.capabilities, clock())

    for namespaces in rounds:
        for namespace, view in link.get_statuses(namespaces, status_timeout):
            views.append((namespace, view))
            # One server serving another model now: DEAD (a fleet skips that replica instead).
            changed = (
                None if isinstance(view, str) else core.check_model(view.capabilities, clock())
            )
            if changed and core.state is ExecutorState.DEAD:
                return HandshakeResult(
                    False, changed, view.instance_id, view.capabilities.model_fingerprint
                )
        placement = choose(
            views, robot, identity.model, identity.replica, core.unanswered_replicas
        )
        core.replicas_skipped(tuple(str(each) for each in placement.skipped))
        for namespace, view in placement.candidates:
            if any(namespace == done for done, _, _ in tried):
                continue
            grant = link.open_session(namespace, settings.handshake_timeout_s, check=check_offered)
            if isinstance(grant, SessionGrant):
                core.session_opened(grant, view.instance_id, clock(), replica=namespace)
                return HandshakeResult(
                    True,
                    f"session opened on {namespace}",
                    view.instance_id,
                    grant.capabilities.model_fingerprint,
                    grant.capabilities.policy_type,
                )
            # the grant offered another model, and there is one server only
            if core.state is ExecutorState.DEAD:
                return HandshakeResult(False, grant, view.instance_id, offered_fingerprints[-1])
            tried.append((namespace, grant, view))
    if not tried:
        asked = _ask_not_serving(core, link, placement, check_offered, clock)
        if isinstance(asked, HandshakeResult):
            return asked
        tried.extend(asked)
    unanswered = not views or any(isinstance(view, str) or not view.ready for _, view in views)
    return placement, tried, unanswered


def _ask_not_serving(
    core: PlacementTarget,
    link: SessionOpener,
    placement: Placement,
    check: Callable[[SessionGrant], str | None],
    clock: Callable[[], float],
) -> HandshakeResult | list:
    """No candidate: ask the first replica that answered but does not serve for a session anyway.

    Its GetStatus says only ready/draining (an inactive server keeps the drain
    flag of its deactivation); its OpenSession refusal says what it is
    (inactive, draining, loading), and that is the reason ~/status and the log
    give. Granted after all (it became ready meanwhile): the session is used.
    """
    for skipped in placement.skipped:
        view = skipped.view
        if view is None or (view.ready and not view.draining):
            continue
        grant = link.open_session(
            skipped.namespace, core.settings.replica_status_timeout_s, check=check
        )
        if isinstance(grant, SessionGrant):
            core.session_opened(grant, view.instance_id, clock(), replica=skipped.namespace)
            return HandshakeResult(
                True,
                f"session opened on {skipped.namespace}",
                view.instance_id,
                grant.capabilities.model_fingerprint,
                grant.capabilities.policy_type,
            )
        return [(skipped.namespace, grant, view)]
    return []


def _failed(
    core: PlacementTarget,
    link: SessionOpener,
    placement: Placement,
    tried: list,
    clock: Callable[[], float],
) -> HandshakeResult:
    """No session anywhere: one failed handshake, named after the first replica that answered."""
    if not tried:
        return _refused(core, placement, clock)
    if len(link.namespaces) == 1:
        reason = tried[0][1]
    else:
        reason = "no replica granted a session: " + "; ".join(
            [f"{namespace}: {problem}" for namespace, problem, _ in tried]
            + [str(each) for each in placement.skipped]
        )
    core.handshake_failed(reason, clock())
    view = tried[0][2]
    return HandshakeResult(False, reason, view.instance_id, view.capabilities.model_fingerprint)


def _refused(
    core: PlacementTarget, placement: Placement, clock: Callable[[], float]
) -> HandshakeResult:
    """No replica can take the robot: a failed handshake, named after the first one that
    answered."""
    reason = placement.refusal()
    core.handshake_failed(reason, clock())
    answered = next((each.view for each in placement.skipped if each.view is not None), None)
    if answered is None:
        return HandshakeResult(False, reason)
    return HandshakeResult(
        False,
        reason,
        answered.instance_id,
        answered.capabilities.model_fingerprint,
        answered.capabilities.policy_type,
    )
