"""The plain values a handshake reads and a placement ranks: what the robot declares, what a server
answers.

Invariant: these are values only (frozen, no behaviour beyond the contract
check), so the handshake (``handshake.py``), the placement (``replicas.py``),
the session client and the core all import them from here and never from
each other: no module of the executor imports the handshake to know what a
server said.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lerobot_ros.protocol.contract import ContractCheck, ServerCapabilities, check_robot


@dataclass(frozen=True)
class ServerView:
    """A GetStatus answer, as plain values."""

    ready: bool
    instance_id: str
    capabilities: ServerCapabilities
    draining: bool = False
    active_sessions: int = 0
    max_sessions: int = 0
    pending_requests: int = 0
    # of active_sessions, those waiting as warm standbys (running nothing)
    standby_sessions: int = 0
    headroom_robots: int = -1  # more robots of the usual rate its capacity model fits; -1: unknown
    # its capacity model's p95 round trip for the open sessions (0: none)
    predicted_p95_ms: float = 0.0
    latency_budget_ms: float = 0.0  # 0: no budget


@dataclass(frozen=True)
class SessionGrant:
    """An accepted OpenSession, as plain values."""

    session_id: str
    rtc_enabled: bool
    observation_topic: str
    action_chunk_topic: str
    capabilities: ServerCapabilities
    warnings: tuple[str, ...] = ()
    # the server closes the session after this long without an observation
    idle_timeout_s: float = math.inf


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
