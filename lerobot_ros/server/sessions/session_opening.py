"""Opening a session, as one decision: serving state, the admission matrix, then the ownership
claim.

Invariant: a session enters the registry only when the server is serving,
``admission.admit`` accepted the robot and ``SessionRegistry.claim`` gave it
the client id; every refusal says why and carries the count of other
clients' sessions the robot is told about. A full server also says when a
slot frees. A standby is admitted by the same decision, counted like any
robot (a standby that would not fit the budget now would not fit when it is
promoted either). No ROS here: the node turns the decision into the service
reply and the data plane.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from lerobot_ros.protocol.contract import OpenRequest, ServerCapabilities
from lerobot_ros.server.sessions.open_checks import Refusal, ServerLoad, admit
from lerobot_ros.server.sessions.registry import Session, SessionRegistry
from lerobot_ros.server.settings import ServerSettings


@dataclass(frozen=True)
class OpenDecision:
    """A new session (accepted) or a refusal with its message; ``active_sessions`` as the robot is
    told."""

    session: Session | None
    refusal: Refusal
    message: str
    active_sessions: int
    replaced: bool = False
    warnings: tuple[str, ...] = ()


def decide_open(
    request: OpenRequest,
    owner_secret: str,
    capabilities: ServerCapabilities,
    load: ServerLoad,
    sessions: SessionRegistry,
    settings: ServerSettings,
    now_s: float | None = None,
    latency_refusal: Callable[[OpenRequest, bool], str | None] | None = None,
) -> OpenDecision:
    """Admit ``request`` against the policy and the load (the session count, then
    ``latency_refusal``: the
    capacity model's predicted p95 against the budget), then claim its client id in
    ``sessions``."""
    admission = admit(capabilities, request, load, strict_fps=settings.strict_fps)
    if not admission.accepted:
        message = admission.message
        if admission.refusal is Refusal.CAPACITY:
            message += "; " + when_a_slot_frees(sessions, settings)
        return OpenDecision(None, admission.refusal, message, load.active_sessions)
    too_slow = (
        latency_refusal(request, admission.rtc_enabled) if latency_refusal is not None else None
    )
    if too_slow:
        return OpenDecision(None, Refusal.CAPACITY, too_slow, load.active_sessions)
    session = Session(
        client_id=request.client_id,
        task=admission.task or settings.default_task,
        fps=request.fps,
        rtc_enabled=admission.rtc_enabled,
        opened_at=time.monotonic() if now_s is None else now_s,
        standby=request.standby,
    )
    claim = sessions.claim(
        session, owner_secret, session.opened_at, settings.session_idle_timeout_s
    )
    if claim.refusal:
        return OpenDecision(None, Refusal.CLIENT_ID_IN_USE, claim.refusal, load.active_sessions)
    return OpenDecision(
        session,
        Refusal.NONE,
        "",
        load.active_sessions,
        replaced=claim.replaced is not None,
        warnings=tuple(admission.warnings),
    )


def when_a_slot_frees(sessions: SessionRegistry, settings: ServerSettings) -> str:
    wait_s = sessions.next_slot_free_s(
        time.monotonic(),
        settings.session_first_observation_timeout_s,
        settings.session_idle_timeout_s,
    )
    if wait_s is not None:
        return (
            f"a slot frees in {wait_s:.1f} s (a session that has not streamed is collected then)"
        )
    return (
        f"every session streams: a slot frees when one closes, or "
        f"{settings.session_idle_timeout_s:g} s after one goes quiet"
    )
