"""The executor core's verbs for its session: handshake outcomes, heartbeats, holds, task, episode,
session end.

Invariant: each verb takes the core's one lock, asks ``SessionState`` what
the event means, and applies that to the fail-safe, the queue and the
request in flight in the same critical section, so a control tick or a
merge sees the session before the event or after it, never half of it.

Mixed into ``core.ExecutorCore``, whose constructor creates the parts named
below; nothing else uses this class.
"""

from __future__ import annotations

import threading

from lerobot_ros.executor.control.action_queue import ActionQueue
from lerobot_ros.executor.control.interpolation import Playback
from lerobot_ros.executor.control.smoothness import SmoothnessTracker
from lerobot_ros.executor.control.state_machine import FailSafe
from lerobot_ros.executor.fleet.hedging import Standby
from lerobot_ros.executor.requests.answer_rules import InFlight
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.executor.session.session_state import Heard, SessionState
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.status import ExecutorState


class SessionVerbs:
    """The session's side of the executor core (all under ``_lock``)."""

    settings: ExecutorSettings
    _lock: threading.Lock
    _failsafe: FailSafe
    _session: SessionState
    _queue: ActionQueue
    _playback: Playback
    _smoothness: SmoothnessTracker
    _in_flight: InFlight
    _dim: int
    _threshold_s: float
    _standby: Standby | None

    def _threshold(self, chunk_size: int, replace_mode: bool = False) -> float:
        raise NotImplementedError  # the core's (trigger.py's rule with its latency tracker)

    def check_model(self, capabilities: ServerCapabilities, now_s: float) -> str | None:
        """On every re-handshake: the server must serve the model of the first one.

        Returns the reason when it does not (and goes DEAD when this executor
        knows one server only: a fleet skips that replica instead); None when
        it does or when this is the first handshake.
        """
        with self._lock:
            difference = self._session.model_difference(capabilities)
            if difference and not self.settings.is_fleet:
                self._failsafe.on_model_changed(now_s, difference)
            return difference

    def session_opened(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str = ""
    ) -> None:
        """A session is open (the first, or a re-opened one, maybe on another replica); the queue
        stays
        (same model), so playback goes on through a move."""
        with self._lock:
            self._open(
                grant, instance_id, now_s, replica or self._session.replica, self._failsafe.reason
            )

    def _open(
        self, grant: SessionGrant, instance_id: str, now_s: float, replica: str, why_left: str
    ) -> None:
        """``session_opened`` under the lock; also a standby's promotion (``why_left``: why the old
        one went)."""
        fresh_queue = self._session.opened(grant, instance_id, now_s, replica, why_left)
        if fresh_queue:
            self._queue = ActionQueue(rtc_enabled=grant.rtc_enabled, action_dim=self._dim)
            self._smoothness.queue_cleared()
            self._playback.stop()
        if self._standby is not None and self._standby.replica == replica:
            # The new session replaced the standby on that replica (one session per client id
            # there).
            self._standby = None
        self._threshold_s = self._threshold(grant.capabilities.chunk_size, grant.rtc_enabled)
        self._failsafe.on_handshake_ok(now_s)
        # settle first
        self._session.fleet.rebalance_after = now_s + self.settings.rebalance_cooldown_s

    def handshake_failed(self, reason: str, now_s: float) -> None:
        with self._lock:
            self._session.handshake_failures += 1
            self._failsafe.on_handshake_failed(now_s, reason)

    @property
    def unanswered_replicas(self) -> frozenset[str]:
        """Replicas whose latest session with this robot never answered with a chunk (placed
        last)."""
        with self._lock:
            return self._session.fleet.unanswered

    def replicas_found(self, replicas: tuple[str, ...]) -> None:
        """The replicas discovery knows now (for ~/status; the placement reads them from the
        link)."""
        with self._lock:
            self._session.fleet.replicas = replicas

    def replicas_skipped(self, skipped: tuple[str, ...]) -> None:
        """The latest placement's skipped replicas, each "namespace: why" (for ~/status)."""
        with self._lock:
            self._session.fleet.skipped = skipped

    def on_heartbeat(
        self, instance_id: str, now_s: float, replica: str = "", draining: bool = False
    ) -> None:
        """A heartbeat of ``replica`` (default: the only one); ``SessionState.heartbeat`` says what
        it means,
        ``Standby.heard`` what it means for the standby when it is the standby's replica."""
        with self._lock:
            standby = self._standby
            if standby is not None and replica == standby.replica:
                lost = standby.heard(instance_id, now_s, draining)
                if lost:
                    self._standby_lost(lost, now_s)
                return
            heard, reason = self._session.heartbeat(
                instance_id, now_s, replica, draining, self._failsafe.accepting_chunks
            )
            if heard is Heard.RESTARTED:
                self._failsafe.on_server_restarted(now_s, reason)
                self._in_flight.cancel()  # its answer will never come
            elif heard is Heard.ALIVE:
                self._failsafe.on_heartbeat(now_s)

    def pause(self, now_s: float, holder: str = "operator") -> None:
        """Hold position (the control tick publishes "hold", nothing is requested) until ``holder``
        resumes."""
        with self._lock:
            self._session.hold(holder, now_s)
            self._failsafe.pause(now_s)

    def resume(self, now_s: float, holder: str = "operator") -> None:
        """``holder`` lets go; the executor streams again once no other holder is left."""
        with self._lock:
            reopen = self._session.let_go(holder, now_s)
            if reopen is None:
                return
            self._failsafe.resume(now_s)
            if reopen:
                self._failsafe.on_server_restarted(now_s, reopen)

    def holds(self, holder: str) -> bool:
        with self._lock:
            return self._session.holds(holder)

    def set_task(self, task: str) -> None:
        """The task the next observations carry (a goal's; the ``task`` parameter otherwise)."""
        with self._lock:
            self._session.task = task

    def clear_queue(self) -> None:
        """Drop the queued actions and the request in flight (a goal begins or ends: they were
        planned for
        another); the tick holds until the next chunk is merged."""
        with self._lock:
            self._clear_queue()

    def _clear_queue(self) -> None:
        self._queue.clear()
        self._playback.stop()
        self._smoothness.queue_cleared()
        self._in_flight.cancel()

    def end_session(self) -> str:
        """The session is being closed (deactivation): its queue and request in flight are dropped,
        and a
        chunk still on its way is dropped too (new epoch); returns the session id to close. The
        standby
        goes too (``end_standby``)."""
        with self._lock:
            self._clear_queue()
            self._failsafe.session_closed()
            return self._session.ended()

    def end_standby(self) -> tuple[str, str] | None:
        """Drop the standby (the session is being closed): (its replica, its session id) to close,
        or None."""
        with self._lock:
            standby, self._standby = self._standby, None
            return None if standby is None else (standby.replica, standby.session_id)

    def resume_offline(self, now_s: float, by: str) -> str | None:
        """Restart motion from OFFLINE (``by``: who asked): None when done, else why not
        (``FailSafe``).

        The queue and the request in flight go (planned before the hold), so
        the first request after it carries a fresh observation and no RTC prefix.
        """
        with self._lock:
            problem = self._failsafe.resume_offline(now_s, by)
            if problem is None:
                self._clear_queue()
            return problem

    def revive(self, now_s: float, by: str) -> None:
        """DEAD: try again (lifecycle activate); ``FailSafe.revive``."""
        with self._lock:
            self._failsafe.revive(now_s, by)

    @property
    def offline(self) -> tuple[bool, bool]:
        """(OFFLINE or DEAD, a session open again): whether a resume must go through
        ``recovery.resume``."""
        with self._lock:
            state = self._failsafe.state
            return state in (
                ExecutorState.OFFLINE,
                ExecutorState.DEAD,
            ), self._failsafe.offline_session

    def reopen(self, now_s: float, reason: str) -> None:
        """Open a new session now (activation after a deactivation): the worker re-handshakes."""
        with self._lock:
            self._failsafe.on_server_restarted(now_s, reason)

    def reset_episode(self) -> tuple[str, int]:
        """Clear the queue and bump the episode; returns (session id, new episode) for the
        server."""
        with self._lock:
            self._queue.clear()
            self._playback.stop()
            self._smoothness.episode_reset()
            session = self._session.next_episode()
            self._in_flight.cancel()
            return session
