"""The executor's start-up handshake with a policy server.

Invariant: the robot never moves unless the server it will take actions from
serves a policy whose contract (ordered action names, cameras, state
dimension) matches this robot; otherwise the node stops with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot_ros.contract import ContractCheck, ServerCapabilities, check_robot


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
