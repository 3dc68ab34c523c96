"""The executor's handshake with a policy server: at start-up and on every re-handshake.

Invariants:

* the robot never moves unless the server it will take actions from serves
  a policy whose contract (ordered action names, cameras, state dimension)
  matches this robot; otherwise the node stops with the reason;
* every re-handshake checks the server's model against the FIRST one, in its
  GetStatus and again in the session it grants, before the data plane is
  built: a different model is never executed (DEAD).

Plain Python: the ROS calls go through a ``SessionOpener`` (the session
client, or a fake in tests); the outcome is reported to the executor core.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from lerobot_ros.contract import ContractCheck, ServerCapabilities, check_robot

if TYPE_CHECKING:
    from lerobot_ros.executor.core import ExecutorCore


@dataclass(frozen=True)
class ServerView:
    """A GetStatus answer, as plain values."""

    ready: bool
    instance_id: str
    capabilities: ServerCapabilities


@dataclass(frozen=True)
class SessionGrant:
    """An accepted OpenSession, as plain values."""

    session_id: str
    rtc_enabled: bool
    observation_topic: str
    action_chunk_topic: str
    capabilities: ServerCapabilities
    warnings: tuple[str, ...] = ()


class SessionOpener(Protocol):
    """What the handshake needs from ROS. Each call is bounded by ``timeout_s``; errors are returned as text."""

    def get_status(self, timeout_s: float) -> ServerView | str: ...

    def open_session(
        self, timeout_s: float, check: Callable[[SessionGrant], str | None]
    ) -> SessionGrant | str:
        """Open a session; ``check`` vets the grant before its data plane is built and matched."""


@dataclass(frozen=True)
class RobotDeclaration:
    """What this robot sends and executes, from the executor's parameters."""

    joint_names: tuple[str, ...]
    camera_names: tuple[str, ...] = ()
    state_dim: int = 0  # 0: not declared, not checked

    def check_against(self, capabilities: ServerCapabilities) -> ContractCheck:
        return check_robot(
            capabilities,
            self.joint_names,
            camera_names=self.camera_names or None,
            state_dim=self.state_dim or None,
        )


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


def evaluate(robot: RobotDeclaration, capabilities: ServerCapabilities, server_ready: bool, instance_id: str) -> HandshakeResult:
    identity = dict(
        server_instance_id=instance_id,
        model_fingerprint=capabilities.model_fingerprint,
        policy_type=capabilities.policy_type,
    )
    if not server_ready:
        return HandshakeResult(False, "server is not ready (still loading or warming up)", **identity)
    check = robot.check_against(capabilities)
    if not check.ok:
        return HandshakeResult(False, check.message(), **identity)
    return HandshakeResult(True, "robot matches the policy contract", **identity)


def handshake(core: ExecutorCore, link: SessionOpener, robot: RobotDeclaration, clock: Callable[[], float]) -> HandshakeResult:
    """GetStatus, contract and model checks, OpenSession and its data plane; reports to the core.

    Used for the first handshake (at start-up) and every re-handshake.
    """
    timeout = core.settings.handshake_timeout_s
    view = link.get_status(timeout)
    if isinstance(view, str):
        core.handshake_failed(view, clock())
        return HandshakeResult(False, view)
    # A re-handshaken server serving another model is DEAD, not merely a mismatch to retry.
    changed = core.check_model(view.capabilities, clock())
    if changed:
        return HandshakeResult(False, changed, view.instance_id, view.capabilities.model_fingerprint)
    checked = evaluate(robot, view.capabilities, view.ready, view.instance_id)
    if not checked.accepted:
        core.handshake_failed(checked.reason, clock())
        return checked
    # The session's capabilities are what the server validated us against: check them too.
    offered_fingerprints = [view.capabilities.model_fingerprint]

    def check_offered(offered: SessionGrant) -> str | None:
        offered_fingerprints.append(offered.capabilities.model_fingerprint)
        return core.check_model(offered.capabilities, clock())

    grant = link.open_session(timeout, check=check_offered)
    if isinstance(grant, str):
        # After a changed model the core is already DEAD, which a failed handshake leaves alone.
        core.handshake_failed(grant, clock())
        # The result names the model the grant offered, when there was a grant.
        return HandshakeResult(False, grant, view.instance_id, offered_fingerprints[-1])
    core.session_opened(grant, view.instance_id, clock())
    return HandshakeResult(
        True, "session opened", view.instance_id, grant.capabilities.model_fingerprint, grant.capabilities.policy_type
    )
