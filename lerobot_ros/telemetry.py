"""Plain snapshots of a node's health, converted to messages by ``wire``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerHealth:
    """Everything in a ServerStatus heartbeat besides the capabilities."""

    instance_id: str
    server_namespace: str
    heartbeat_seq: int
    ready: bool
    draining: bool
    uptime_s: float
    active_sessions: int = 0
    max_sessions: int = 0
    pending_requests: int = 0
    utilization: float = 0.0
    requests_served: int = 0
    requests_rejected: int = 0
    observations_superseded: int = 0
    inference_ms_p50: float = 0.0
    inference_ms_p95: float = 0.0
