"""The sessions a server holds, one per client id, and every rule about them.

Invariants:
- at most one session per client id: re-opening replaces the old one and
  does not count against capacity;
- a removal names the session it means, so a late close or garbage
  collection of an old session never removes its replacement;
- a request naming a session id that is not the client's open one is refused
  with the same text everywhere (``named``);
- a session's episode only moves forward, and only ``advance_episode`` moves
  it, under the registry lock. Two threads call it: the service thread for
  ResetEpisode and the inference worker for an observation of a newer episode
  (an observation may overtake its ResetEpisode call). The same episode again
  is an idempotent success, an older one is refused, a newer one advances and
  marks the session's processors stale;
- stale processors are reset exactly once before the session's next request:
  ``claim_processor_reset`` reads and clears the mark under the same lock, and
  only the inference worker (the one thread touching processors and the
  policy) calls it. A new session starts stale, so the policy (exclusive
  mode) is reset before its first request;
- a session ends when it has sent no observation for ``idle_timeout_s`` or
  when its observation publisher, once seen, has been absent from the ROS
  graph for ``PUBLISHER_GONE_GRACE_S`` (``expired``; the garbage-collection
  timer calls it).

Plain Python: ROS callbacks, the garbage collector and the inference worker
all touch the registry, each through one method.
"""

from __future__ import annotations

import enum
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lerobot_ros.contract import shown

# A router restart or a blip drops graph information for a moment (rmw_zenoh
# liveliness); only an absence lasting this long counts as the robot gone.
PUBLISHER_GONE_GRACE_S = 3.0


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
    # An episode boundary passed or the session is new; the worker resets
    # the processors before the next request.
    processors_stale: bool = True

    def __post_init__(self) -> None:
        self.last_seen = self.last_seen or self.opened_at


class EpisodeMove(enum.Enum):
    """What asking for an episode did to a session."""

    CURRENT = "current"  # already there: a repeated call, or an observation overtook it
    ADVANCED = "advanced"
    OVER = "over"  # older than the session's episode: refused


@dataclass(frozen=True)
class EpisodeReset:
    """The answer to a ResetEpisode request."""

    success: bool
    episode: int
    message: str = ""


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

    def named(self, client_id: str, session_id: str) -> tuple[Session | None, str]:
        """The client's open session if it is ``session_id``; else None and why."""
        session = self.get(client_id)
        if session is not None and session.session_id == session_id:
            return session, ""
        # Ids as the robot sent them, however long: shown cut, never echoed whole.
        return None, f"no open session {shown(session_id)} for client {shown(client_id)}" + (
            f" (its open session is {session.session_id!r})" if session else ""
        )

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

    # ---- episodes -------------------------------------------------------

    def advance_episode(self, session: Session, episode: int) -> tuple[EpisodeMove, int]:
        """Move ``session`` to ``episode`` if it is newer; return what happened and the episode it is at."""
        with self._lock:
            if episode == session.episode:
                return EpisodeMove.CURRENT, session.episode
            if episode < session.episode:
                return EpisodeMove.OVER, session.episode
            session.episode, session.processors_stale = episode, True
            return EpisodeMove.ADVANCED, session.episode

    def reset_episode(self, client_id: str, session_id: str, episode: int) -> EpisodeReset:
        """The ResetEpisode rule: the named session moves to ``episode``, or why not."""
        session, why = self.named(client_id, session_id)
        if session is None:
            return EpisodeReset(False, 0, why)
        move, current = self.advance_episode(session, episode)
        if move is EpisodeMove.OVER:
            return EpisodeReset(False, current, f"episode {episode} is not after the current episode {current}")
        return EpisodeReset(True, current)

    def claim_processor_reset(self, session: Session) -> bool:
        """True once after the session went stale: the caller resets its processors now."""
        with self._lock:
            stale, session.processors_stale = session.processors_stale, False
            return stale

    # ---- expiry ---------------------------------------------------------

    def observed(self, client_id: str, now: float) -> None:
        """An observation arrived for the client: its session is not idle."""
        with self._lock:
            session = self._by_client.get(client_id)
            if session is not None:
                session.last_seen = now

    def idle(self, now: float, idle_timeout_s: float) -> list[Session]:
        """Sessions with no observation for longer than ``idle_timeout_s``."""
        with self._lock:
            return [s for s in self._by_client.values() if now - s.last_seen > idle_timeout_s]

    def expired(
        self, now: float, idle_timeout_s: float, publisher_count: Callable[[str], int]
    ) -> list[tuple[Session, str]]:
        """Sessions to end now and why: idle ones, and those whose observation publisher left the graph.

        ``publisher_count(client_id)`` is asked outside the lock (it queries the ROS graph).
        """
        idle = self.idle(now, idle_timeout_s)
        ending = [(session, f"no observation for {idle_timeout_s:g} s") for session in idle]
        idle_clients = {session.client_id for session in idle}
        counts = {s.client_id: publisher_count(s.client_id) for s in self.sessions() if s.client_id not in idle_clients}
        with self._lock:
            for client_id, publishers in counts.items():
                session = self._by_client.get(client_id)
                if session is None:
                    continue
                if publishers:
                    session.publisher_seen, session.publisher_missing_since = True, None
                elif session.publisher_seen:
                    session.publisher_missing_since = session.publisher_missing_since or now
                    if now - session.publisher_missing_since >= PUBLISHER_GONE_GRACE_S:
                        why = f"its observation publisher left the ROS graph {PUBLISHER_GONE_GRACE_S:g} s ago"
                        ending.append((session, why))
        return ending
