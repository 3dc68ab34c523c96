"""The sessions a server holds, one per client id, and every rule about them.

Invariants:
- at most one session per client id: re-opening replaces the old one and
  does not count against capacity;
- each session has a secret, sent only in the OpenSession reply: closing,
  resetting or replacing it needs that secret (``owned``, ``claim``). A client
  id whose session streams is "in use": an open without the secret is
  refused until that session has been quiet for the idle bound or its
  observation publisher has left the graph. A session that has not streamed
  yet may be replaced by anyone (a squatter cannot lock its robot out), and
  its replacement keeps its opening time: re-opening never extends a
  session that never streamed. A standby (below) is such a session too: a
  stranger may replace it, which costs its robot only the reserved place
  (on failover the robot finds its standby gone and places itself as on
  any replica loss); a standby neither takes nor hands on an opening time,
  since its wait is bounded by its robot's presence on the graph, not by a
  time;
- no refusal, log line or status echoes another session's id or secret;
- a removal names the session it means, so a late close or garbage
  collection of an old session never removes its replacement;
- an observation is admitted (``admit_observation``) only if it names the
  client's open session, its epoch is the session's (fixed by its first
  observation), its seq is greater than the last admitted one and its MAC
  verifies with that session's secret, checked in that order (the MAC, the
  only costly check, last); only an admitted observation keeps a session
  from going idle;
- a session's episode only moves forward, and only ``advance_episode`` moves
  it, under the registry lock. Two threads call it: the service thread for
  ResetEpisode and the inference worker for an observation of a newer episode
  (an observation may overtake its ResetEpisode call). ResetEpisode must name
  a later episode than the last one a reset confirmed: the episode an
  observation already moved to is confirmed once, anything else not after
  the current one is refused. A newer episode marks the session's processors
  stale;
- stale processors are reset exactly once before the session's next request:
  ``claim_processor_reset`` reads and clears the mark under the same lock, and
  only the inference worker (the one thread touching processors and the
  policy) calls it. A new session starts stale, so the policy (exclusive
  mode) is reset before its first request;
- a session ends when it has sent no observation within
  ``first_observation_timeout_s`` of opening, none for ``idle_timeout_s``, or
  when its observation publisher, once seen, has been absent from the ROS
  graph for ``PUBLISHER_GONE_GRACE_S`` (``expired``; the garbage-collection
  timer calls it);
- a *standby* (a warm standby session: the failover place of a robot served
  by another replica; ``Session.standby``, from OpenSession's ``standby``)
  runs nothing and is exempt from the first-observation and idle timeouts
  while it waits; it ends only when its robot is gone: its observation
  publisher never on the graph within ``first_observation_timeout_s`` of
  opening, or, once seen, absent for ``PUBLISHER_GONE_GRACE_S``. It counts
  as a session everywhere else (``count``, the capacity gate at its declared
  rate). Its first admitted observation promotes it (``standby`` cleared,
  under the lock that admits it): an ordinary session from then on. A
  re-open with the owner's secret may ask for a standby again (the robot
  re-arms it after a hedge the other replica won).

Plain Python: ROS callbacks, the garbage collector and the inference worker
all touch the registry, each through one method.
"""

from __future__ import annotations

import enum
import hmac
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lerobot_ros.protocol.contract import shown
from lerobot_ros.protocol.wire.data_plane import integrity

# A router restart or a blip drops graph information for a moment (rmw_zenoh
# liveliness); only an absence lasting this long counts as the robot gone.
PUBLISHER_GONE_GRACE_S = 3.0


#: Accepted observations remembered per session for its observed rate.
ARRIVALS_KEPT = 64


@dataclass
class Session:
    """One robot's session. ``processors`` is the per-session pre/post pipeline pair."""

    client_id: str
    task: str
    fps: float
    rtc_enabled: bool
    opened_at: float
    session_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    secret: str = field(default_factory=integrity.new_secret, repr=False)
    episode: int = 0
    # Whether the episode was confirmed by a ResetEpisode (or is the first
    # one), or only reached by an observation that overtook its reset.
    episode_confirmed: bool = True
    # Set by the first admitted observation: the epoch every later one must
    # carry, and the seq the next one must exceed.
    epoch: int | None = None
    last_seq: int | None = None
    last_seen: float = 0.0
    processors: Any = None
    # Set once the client's observation publisher has been seen on the graph,
    # so its disappearance can be told apart from "not connected yet".
    publisher_seen: bool = False
    publisher_missing_since: float | None = None
    # An episode boundary passed or the session is new; the worker resets
    # the processors before the next request.
    processors_stale: bool = True
    # When its recent accepted observations arrived: the rate it really asks at (capacity_gate.py).
    arrivals: deque = field(default_factory=lambda: deque(maxlen=ARRIVALS_KEPT), repr=False)
    # A warm standby waiting for its first observation (opened with OpenSession's standby); the
    # first admitted observation clears it (promotion).
    standby: bool = False

    def __post_init__(self) -> None:
        self.last_seen = self.last_seen or self.opened_at

    def observed_rate_hz(self, now: float, window_s: float = 10.0) -> float:
        """Accepted observations per second over the recent window; 0 until a few seconds of them
        are seen."""
        recent = [at for at in self.arrivals if now - at <= window_s]
        if len(recent) < 3 or recent[-1] - recent[0] < 1.0:
            return 0.0
        return (len(recent) - 1) / (recent[-1] - recent[0])

    @property
    def key(self) -> bytes:
        return integrity.session_key(self.secret)

    @property
    def streamed(self) -> bool:
        return self.last_seq is not None

    def opens_with(self, secret: str) -> bool:
        return bool(secret) and hmac.compare_digest(secret.encode(), self.secret.encode())


class ArrivalRefusal(str):
    """Why an observation was refused on arrival: the text, with a short ``kind`` for counting
    (no_session, session_id, epoch, seq, mac, closed)."""

    kind: str

    def __new__(cls, kind: str, text: str) -> ArrivalRefusal:
        refusal = super().__new__(cls, text)
        refusal.kind = kind
        return refusal


def _order_refusal(session: Session, msg) -> ArrivalRefusal | None:
    """The epoch and seq rules (cheap: two integers); call under the registry lock."""
    if session.epoch is not None and msg.epoch != session.epoch:
        return ArrivalRefusal(
            "epoch", f"epoch {msg.epoch} is not this session's epoch {session.epoch}"
        )
    if session.last_seq is not None and msg.seq <= session.last_seq:
        return ArrivalRefusal(
            "seq",
            f"seq {msg.seq} replays or reorders: expected a seq greater than {session.last_seq}",
        )
    return None


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


@dataclass(frozen=True)
class Claim:
    """The answer to an OpenSession for a client id: the session it replaced, or why it was
    refused."""

    replaced: Session | None = None
    refusal: str = ""


class SessionRegistry:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_client: dict[str, Session] = {}

    def open(self, session: Session) -> Session | None:
        """Add ``session`` unconditionally (warm-up, replay, tests); return the one it replaced."""
        with self._lock:
            previous = self._by_client.get(session.client_id)
            self._by_client[session.client_id] = session
            return previous

    def claim(
        self, session: Session, owner_secret: str, now: float, idle_timeout_s: float
    ) -> Claim:
        """The OpenSession rule: add ``session`` unless its client id is in use by a streaming
        session.

        ``owner_secret`` proves ownership of the live session. A replaced
        session that never streamed hands its opening time on, unless either
        is a standby (whose wait no time bounds).
        """
        with self._lock:
            live = self._by_client.get(session.client_id)
            if live is not None:
                quiet_s = now - live.last_seen
                free = (
                    live.opens_with(owner_secret)
                    or not live.streamed
                    or quiet_s > idle_timeout_s
                    or live.publisher_missing_since is not None
                )
                if not free:
                    return Claim(
                        refusal=(
                            f"client id {shown(session.client_id)} is in use by a session that is "
                            "streaming; "
                            "re-open with that session's secret (owner_secret), or once it has "
                            "been quiet for "
                            f"{idle_timeout_s:g} s (it was last heard {quiet_s:.1f} s ago)"
                        )
                    )
                if not live.streamed and not live.standby and not session.standby:
                    session.opened_at = session.last_seen = min(session.opened_at, live.opened_at)
            self._by_client[session.client_id] = session
            return Claim(replaced=live)

    def next_slot_free_s(
        self, now: float, first_observation_timeout_s: float, idle_timeout_s: float
    ) -> float | None:
        """Seconds until the earliest session that never streamed is collected; None if all stream
        (or wait
        as standbys, which no time collects)."""
        with self._lock:
            waits = [
                min(s.opened_at + first_observation_timeout_s, s.last_seen + idle_timeout_s) - now
                for s in self._by_client.values()
                if not s.streamed and not s.standby
            ]
        return max(0.0, min(waits)) if waits else None

    def get(self, client_id: str) -> Session | None:
        with self._lock:
            return self._by_client.get(client_id)

    def owned(self, client_id: str, session_id: str, secret: str) -> tuple[Session | None, str]:
        """The client's open session if it is ``session_id`` and ``secret`` is its secret; else
        None and why.

        One text whichever part is wrong, and never the open session's id:
        a refusal is no oracle for another robot's session.
        """
        session = self.get(client_id)
        if session is not None and session.session_id == session_id and session.opens_with(secret):
            return session, ""
        # Ids as the caller sent them, however long: shown cut, never echoed whole.
        return (
            None,
            f"client {shown(client_id)} has no open session {shown(session_id)} that this secret "
            "opens",
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

    def standby_count(self) -> int:
        """Sessions waiting as standbys (included in ``count``)."""
        with self._lock:
            return sum(1 for session in self._by_client.values() if session.standby)

    # ---- episodes -------------------------------------------------------

    def advance_episode(self, session: Session, episode: int) -> tuple[EpisodeMove, int]:
        """Move ``session`` to ``episode`` if it is newer; return what happened and the episode it
        is at."""
        with self._lock:
            if episode == session.episode:
                return EpisodeMove.CURRENT, session.episode
            if episode < session.episode:
                return EpisodeMove.OVER, session.episode
            session.episode, session.processors_stale, session.episode_confirmed = (
                episode,
                True,
                False,
            )
            return EpisodeMove.ADVANCED, session.episode

    def reset_episode(
        self, client_id: str, session_id: str, secret: str, episode: int
    ) -> EpisodeReset:
        """The ResetEpisode rule: the owned session moves to a later ``episode``, or why not."""
        session, why = self.owned(client_id, session_id, secret)
        if session is None:
            return EpisodeReset(False, 0, why)
        with self._lock:
            current = session.episode
            if episode > current or (episode == current and not session.episode_confirmed):
                session.processors_stale |= episode > current
                session.episode, session.episode_confirmed = episode, True
                return EpisodeReset(True, episode)
        return EpisodeReset(
            False, current, f"episode {episode} is not after the current episode {current}"
        )

    def claim_processor_reset(self, session: Session) -> bool:
        """True once after the session went stale: the caller resets its processors now."""
        with self._lock:
            stale, session.processors_stale = session.processors_stale, False
            return stale

    # ---- expiry ---------------------------------------------------------

    def admit_observation(
        self, client_id: str, msg, now: float, promoted: Callable[[Session], None] | None = None
    ) -> ArrivalRefusal | None:
        """Why the Observation ``msg`` on the client's topic must not be queued, or None (then it
        keeps the session from going idle). The cheap checks (session, epoch, seq) run first, so a
        replayed, stale or misaddressed message never costs a MAC; the MAC runs outside the lock
        (it reads the whole message) and the cheap checks run again under it before anything is
        committed. An admitted observation promotes a standby; ``promoted(session)`` is then
        called, outside the lock."""
        session = self.get(client_id)
        if session is None:
            return ArrivalRefusal("no_session", f"client {shown(client_id)} has no open session")
        if msg.session_id != session.session_id:
            return ArrivalRefusal(
                "session_id",
                f"session id {shown(msg.session_id)} is not the open session of client "
                f"{shown(client_id)}",
            )
        with self._lock:
            cheap = _order_refusal(session, msg)
        if cheap is not None:
            return cheap
        forged = integrity.verify(msg, session.key)
        if forged:
            return ArrivalRefusal("mac", forged)
        with self._lock:
            if self._by_client.get(client_id) is not session:
                return ArrivalRefusal(
                    "closed",
                    f"the session of client {shown(client_id)} closed while the observation was "
                    "checked",
                )
            late = _order_refusal(session, msg)
            if late is not None:
                return late
            session.epoch, session.last_seq, session.last_seen = msg.epoch, msg.seq, now
            session.arrivals.append(now)
            was_standby, session.standby = session.standby, False
        if was_standby and promoted is not None:
            promoted(session)
        return None

    def idle(self, now: float, idle_timeout_s: float) -> list[Session]:
        """Sessions with no observation for longer than ``idle_timeout_s`` (a waiting standby is
        never idle)."""
        with self._lock:
            return [
                s
                for s in self._by_client.values()
                if now - s.last_seen > idle_timeout_s and not s.standby
            ]

    def expired(
        self,
        now: float,
        idle_timeout_s: float,
        publisher_count: Callable[[str], int],
        first_observation_timeout_s: float | None = None,
    ) -> list[tuple[Session, str]]:
        """Sessions to end now and why: never streamed within ``first_observation_timeout_s`` of
        opening, idle, or their observation publisher left the graph; a standby only for the last,
        or when its publisher never appeared within ``first_observation_timeout_s`` of opening.

        ``publisher_count(client_id)`` is asked outside the lock (it queries the ROS graph).
        """
        with self._lock:
            unused = [
                s
                for s in self._by_client.values()
                if first_observation_timeout_s is not None
                and not s.streamed
                and not s.standby
                and now - s.opened_at > first_observation_timeout_s
            ]
        ending = [
            (s, f"no observation within {first_observation_timeout_s:g} s of opening")
            for s in unused
        ]
        collected = {id(s) for s in unused}
        idle = [s for s in self.idle(now, idle_timeout_s) if id(s) not in collected]
        ending += [(session, f"no observation for {idle_timeout_s:g} s") for session in idle]
        idle = unused + idle
        idle_clients = {session.client_id for session in idle}
        counts = {
            s.client_id: publisher_count(s.client_id)
            for s in self.sessions()
            if s.client_id not in idle_clients
        }
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
                        why = (
                            "its observation publisher left the ROS graph "
                            f"{PUBLISHER_GONE_GRACE_S:g} s ago"
                        )
                        ending.append((session, why + (" (standby)" if session.standby else "")))
                elif (
                    session.standby
                    and first_observation_timeout_s is not None
                    and now - session.opened_at > first_observation_timeout_s
                ):
                    ending.append(
                        (
                            session,
                            f"standby: its observation publisher never appeared on the ROS graph "
                            f"within {first_observation_timeout_s:g} s of opening",
                        )
                    )
        return ending
