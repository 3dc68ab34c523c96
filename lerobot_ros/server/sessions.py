"""The sessions a server holds, one per client id.

Invariants: at most one session per client id (re-opening replaces the old
one and does not count against capacity); a removal names the session it
means, so a late close or garbage collection of an old session never removes
its replacement. Thread-safe: ROS callbacks, the garbage collector and the
inference worker all touch the registry.
"""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Session:
    """One robot's session. ``processors`` is the per-session pre/post pipeline pair."""

    client_id: str
    task: str
    fps: float
    rtc_enabled: bool
    opened_at: float
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    episode: int = 0
    last_seen: float = 0.0
    processors: Any = None
    # Set once the client's observation publisher has been seen on the graph,
    # so its disappearance can be told apart from "not connected yet".
    publisher_seen: bool = False
    publisher_missing_since: float | None = None
    # An episode boundary was announced (ResetEpisode); the worker thread,
    # the only one that touches processors, resets them before the next request.
    processors_stale: bool = False

    def __post_init__(self) -> None:
        self.last_seen = self.last_seen or self.opened_at


class SessionRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_client: dict[str, Session] = {}

    def open(self, session: Session) -> Session | None:
        """Add ``session``; return the session it replaced for the same client, if any."""
        with self._lock:
            previous = self._by_client.get(session.client_id)
            self._by_client[session.client_id] = session
            return previous

    def get(self, client_id: str) -> Session | None:
        with self._lock:
            return self._by_client.get(client_id)

    def remove(self, client_id: str, session_id: str) -> Session | None:
        """Remove the client's session only if it is still ``session_id``."""
        with self._lock:
            current = self._by_client.get(client_id)
            if current is None or current.session_id != session_id:
                return None
            del self._by_client[client_id]
            return current

    def count(self, excluding_client: str | None = None) -> int:
        with self._lock:
            return sum(1 for client in self._by_client if client != excluding_client)

    def sessions(self) -> list[Session]:
        with self._lock:
            return list(self._by_client.values())

    def idle(self, now: float, idle_timeout_s: float) -> list[Session]:
        """Sessions with no observation for longer than ``idle_timeout_s``."""
        with self._lock:
            return [s for s in self._by_client.values() if now - s.last_seen > idle_timeout_s]
