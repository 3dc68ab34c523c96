"""The executor's session with its server: who it is, which model, whether it still hears it, who
holds it.

Invariants:

* the model validated by the FIRST handshake is the only one ever executed:
  every later server and grant is compared with it (``model_difference``);
* the session identity (``SessionIdentity``) is one frozen value, replaced
  as a whole (a session opens or re-opens, an episode resets, a session
  ends), so every reader sees one consistent session, episode and epoch;
* only the current replica's heartbeat counts; another instance heard while
  ours still beats is a second server on the namespace: reported, never
  followed (no flapping); once ours is silent it is a restart;
* a hold is kept by name: the operator's pause, the lifecycle's deactivation
  and "no goal" each hold independently, and the executor streams again only
  when none holds; letting go after the server may have closed the session
  as idle re-opens it;
* the task each observation carries is the one set last (a goal's), or the
  ``task`` parameter.

Plain Python and NOT thread-safe, like ``FailSafe``: the executor core owns
one and uses it only under its lock. It decides; the core applies what a
decision means to the fail-safe, the queue and the request in flight.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass

from lerobot_ros.executor.fleet.replicas import FleetRecord
from lerobot_ros.executor.requests.answer_rules import ValidatedModel
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.telemetry import ServerHealth

#: A resume re-opens the session when the server has not heard from it for
#: this share of the idle timeout it granted the session with: the server may
#: have closed it, and a fresh one costs one call, not two unanswered requests.
REOPEN_AT_IDLE_SHARE = 0.5


@dataclass(frozen=True)
class SessionIdentity:
    """Which server, session, episode and epoch the executor is in, and what a chunk must match.

    ``model`` is the one of the FIRST handshake and never changes afterwards;
    ``epoch`` counts re-opened sessions; ``episode`` counts resets.
    """

    model: ValidatedModel | None = None
    instance_id: str = ""
    session_id: str = ""
    rtc_active: bool = False
    rtc_horizon: int = 0
    chunk_size: int = 0
    policy_cameras: frozenset[str] | None = None  # None until a session is open
    epoch: int = 0
    episode: int = 0
    replica: str = ""  # the server namespace the session is open on
    # the server closes the session after this long without an observation
    idle_timeout_s: float = math.inf
    # the policy's (height, width) per camera
    camera_sizes: Mapping[str, tuple[int, int]] | None = None


class Heard(enum.Enum):
    """What one heartbeat means for the session."""

    IGNORED = "ignored"  # another replica's, or a second instance's while ours beats
    ALIVE = "alive"  # the session's server is there
    RESTARTED = "restarted"  # another instance replaced it: its sessions are gone


class SessionState:
    """The session's identity, model, heartbeat, holds, task and fleet record (guarded by the
    core's lock)."""

    def __init__(
        self, replicas: tuple[str, ...], heartbeat_timeout_s: float, task: str, now_s: float
    ) -> None:
        self.identity = SessionIdentity()
        self.default_task = task
        self.task = task
        self.fleet = FleetRecord(replicas)
        self.other_instance = ""  # a second server instance heard on the namespace meanwhile
        self.handshake_failures = 0
        self._replicas = replicas
        self._heartbeat_timeout_s = heartbeat_timeout_s
        self._known_heard_at = now_s  # the latest heartbeat of the instance the session is with
        self._last_heard_s = now_s  # the latest observation sent in this session, or its opening
        self._paused_since: float | None = None
        self._holders: set[str] = set()

    @property
    def replica(self) -> str:
        """The replica the session is (or will be) on: the first configured one until a session
        opens
        ("" before then when the replicas are discovered)."""
        return self.identity.replica or self._first

    @property
    def _first(self) -> str:
        return self._replicas[0] if self._replicas else ""

    # ------------------------------------------------------------ opening

    def model_difference(self, capabilities: ServerCapabilities) -> str | None:
        """Why ``capabilities`` do not serve the FIRST handshake's model; None when they do or none
        was validated."""
        validated = self.identity.model
        if validated is None:
            return None
        return validated.difference(ValidatedModel.of(capabilities))

    def opened(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str, why_left: str
    ) -> bool:
        """A session is open (the first, or a re-opened one, maybe on another replica);
        ``why_left`` the reason
        the old one was left. Whether the queued actions must go: the merge mode is fixed per
        queue."""
        capabilities = grant.capabilities
        previous = self.identity
        first = previous.model is None
        self.fleet.take_drain()  # announced by the replica this session replaces
        if not first:
            self.fleet.session_left(previous.replica)
            if replica != previous.replica:
                self.fleet.moved(previous.replica, replica, why_left)
        self.identity = SessionIdentity(
            model=ValidatedModel.of(capabilities) if first else previous.model,
            instance_id=instance_id,
            session_id=grant.session_id,
            rtc_active=grant.rtc_enabled,
            rtc_horizon=capabilities.rtc_execution_horizon,
            chunk_size=capabilities.chunk_size,
            policy_cameras=frozenset(capabilities.camera_names),
            epoch=0 if first else previous.epoch + 1,
            episode=previous.episode,
            replica=replica,
            idle_timeout_s=grant.idle_timeout_s,
            camera_sizes=capabilities.camera_sizes,
        )
        self._last_heard_s = now_s
        self._known_heard_at, self.other_instance = now_s, ""
        return first or grant.rtc_enabled != previous.rtc_active

    def observation_sent(self, now_s: float) -> None:
        """The server heard from this session now (its idle timeout starts again)."""
        self._last_heard_s = now_s

    def ended(self) -> str:
        """The session is being closed: a chunk still on its way belongs to an old epoch; the id to
        close."""
        session_id = self.identity.session_id
        self.identity = dataclasses.replace(
            self.identity, session_id="", epoch=self.identity.epoch + 1
        )
        return session_id

    def next_episode(self) -> tuple[str, int]:
        """A reset: (session id, the new episode) for the server."""
        self.identity = dataclasses.replace(self.identity, episode=self.identity.episode + 1)
        return self.identity.session_id, self.identity.episode

    # ----------------------------------------------------------- heartbeat

    def heartbeat(
        self, health: ServerHealth, now_s: float, replica: str, streaming: bool
    ) -> tuple[Heard, str]:
        """What a heartbeat (``health``) of ``replica`` ("" the only one) means, with the
        restart's reason.

        ``streaming``: chunks are accepted now, so an announced drain moves the
        robot (once the request in flight is answered: the drain still delivers it).
        """
        if (replica or self._first) != self.replica:
            return Heard.IGNORED, ""
        known, instance_id = self.identity.instance_id, health.instance_id
        if known and instance_id == known:
            self._known_heard_at = now_s
        elif known and now_s - self._known_heard_at <= self._heartbeat_timeout_s:
            self.other_instance = instance_id
            return Heard.IGNORED, ""
        if health.draining and streaming:
            self.fleet.drain_announced(f"server {self.identity.replica} announced a drain")
        if known and instance_id != known:
            return (
                Heard.RESTARTED,
                f"server restarted (instance {known} -> {instance_id}): its sessions are gone",
            )
        return Heard.ALIVE, ""

    # --------------------------------------------------------------- holds

    def hold(self, holder: str, now_s: float) -> None:
        self._holders.add(holder)
        if self._paused_since is None:
            self._paused_since = now_s

    def let_go(self, holder: str, now_s: float) -> str | None:
        """``holder`` lets go. None while another holder is left; otherwise why the session must be
        re-opened ("" when it need not: the server heard from it within its idle timeout, or it was
        never held)."""
        self._holders.discard(holder)
        if self._holders:
            return None
        paused_since, self._paused_since = self._paused_since, None
        if paused_since is None:
            return ""
        quiet_s = now_s - self._last_heard_s
        idle_timeout_s = self.identity.idle_timeout_s
        if quiet_s <= REOPEN_AT_IDLE_SHARE * idle_timeout_s:
            return ""
        # Nothing was sent while held: an observation on a closed session goes
        # nowhere, and two unanswered requests would spend the offline budget.
        return (
            f"resumed after {quiet_s:.1f} s without an observation (the server closes a session "
            f"after {idle_timeout_s:g} s): re-opening the session"
        )

    def holds(self, holder: str) -> bool:
        return holder in self._holders
