"""The network worker: re-handshakes and the one-request-in-flight cycle.

Invariants:

* exactly one request in flight: the worker publishes one observation, then
  waits (up to ``request_timeout_s``) for the chunk answering exactly it,
  merges it, and only then may send the next; with a warm standby, a
  request late past the hedge deadline is also sent there (the same
  request's race, ``hedging.py``), and the first valid answer is merged;
* a lost replica with a usable standby moves the robot there at once
  (``promote_standby``), without a placement; a rebalancing move
  (``rebalancing.py``) is carried out here too, between two requests;
* it never runs on the control loop's thread, so no network wait can delay
  a command;
* idle, it sleeps on the core's work event, which the control tick sets when
  a request or a re-handshake is due (no polling); ``idle_s`` only bounds one
  wait;
* a due request that could not be sent (inputs missing or too old, publish
  failed) is retried once per policy step, not at every control tick that
  finds it still due: new sensor data comes at sensor rates, and at 250 Hz
  the tick would otherwise have the worker assemble observations 250 times
  a second.

Plain Python: everything ROS goes through a ``ServerLink`` (the executor's
session client), so tests drive the cycle with a fake; the core is reached
only through its verbs, one request through one sequence
(``start_request``, the link's ``send_observation``, ``complete_request``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.fleet.rebalancing import decide
from lerobot_ros.executor.fleet.replicas import PlannedMove
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.handshake import SessionOpener, handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, SessionGrant

#: Longest single idle wait (seconds); the control tick's wake-up normally ends it first.
IDLE_WAIT_S = 1.0


class ServerLink(SessionOpener, Protocol):
    """The handshake's calls, publishing one pending request's observation (an error is returned as
    text), and closing a session that no longer serves the robot (bounded, best effort)."""

    def send_observation(self, pending: PendingRequest) -> str | None: ...

    def close_session_at(self, namespace: str, session_id: str) -> None: ...


class NetworkWorker(threading.Thread):
    """Runs re-handshakes and requests until ``stop``; never touches the control path."""

    def __init__(
        self,
        core: ExecutorCore,
        link: ServerLink,
        robot: RobotDeclaration,
        clock: Callable[[], float] = time.monotonic,
        clock_ns: Callable[[], int] = time.monotonic_ns,
        log: Callable[[str], None] = lambda text: None,
    ) -> None:
        super().__init__(name="lerobot_ros_network_worker", daemon=True)
        self.core, self.link, self.robot = core, link, robot
        self.clock, self.clock_ns, self.log = clock, clock_ns, log
        self._stop_event = threading.Event()
        # The control tick wakes the worker; this only bounds a wait if ticks stop (shutdown).
        self.idle_s = IDLE_WAIT_S
        self.retry_s = 1.0 / core.settings.fps  # after a due request could not be sent
        self._not_sent = False  # the latest step found a request due and could not send it

    def stop(self) -> None:
        self._stop_event.set()
        stopping = getattr(self.link, "stopping", None)
        if stopping is not None:
            stopping.set()
        self.core.cancel_request()
        self.core.wake_worker()

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def run(self) -> None:
        while not self._stop_event.is_set():
            if self.step() or self._stop_event.is_set():
                continue
            if self._not_sent:
                # every tick still says "due": do not listen to it
                self._stop_event.wait(self.retry_s)
            else:
                self.core.wait_for_work(self.idle_s)

    def step(self) -> bool:
        """One unit of work; False when there was nothing to do, or a due request could not be
        sent."""
        self._not_sent = False
        now = self.clock()
        if self.core.reconnect_due(now):
            # a warm standby: no placement, the next request goes there
            if self.core.promote_standby(now):
                self.log(
                    f"serving replica lost: moved to the standby on {self.core.identity.replica}"
                )
                return True
            # an operator's resume may be handshaking: never two at once
            with self.core.handshaking:
                if not self.core.reconnect_due(self.clock()):
                    return True
                result = handshake(self.core, self.link, self.robot, self.clock)
            self.log(
                f"re-handshake: {'accepted' if result.accepted else 'failed'}: {result.reason}"
            )
            return True
        # a rebalancing move: between two requests, never during one
        move = self.core.due_move(now)
        if move is not None:
            self.log(self.move(move))
            return True
        if self.core.request_due(now):
            return self.request_once()
        return False

    def move(self, move: PlannedMove) -> str:
        """Carry out a rebalancing move (``rebalancing.py``): the robot's standby on the target is
        re-opened as a serving session (so its server counts it as serving at once, not at its
        first observation), becomes the session, and the session left is closed at once (its
        server's load drops now). All in the worker's gap between two requests: other robots' looks
        see the move as one step."""
        settings, current = self.core.settings, self.core.identity.replica
        # The look that planned it may be a request's time old: another robot may have moved
        # meanwhile.
        fresh = decide(
            current,
            self.link.get_statuses((current, move.target), settings.replica_status_timeout_s),
            self.robot,
            self.core.identity.model,
            settings.rebalance_hysteresis,
            self.core.unanswered_replicas,
        )
        if fresh is None or fresh.target != move.target:
            self.core.move_abandoned("no longer worth it on the replicas' counts now")
            return (
                f"rebalancing move to {move.target} abandoned: no longer worth it on the "
                "counts now"
            )
        grant = self.link.open_session(
            move.target,
            settings.replica_status_timeout_s + 2.0,
            check=lambda offered: self.core.check_model(offered.capabilities, self.clock()),
        )
        if not isinstance(grant, SessionGrant):
            self.core.move_abandoned(grant)
            return f"rebalancing move to {move.target} abandoned: {grant}"
        left = self.core.move_opened(grant, self.clock())
        if left is None:
            self.link.close_session_at(move.target, grant.session_id)
            return f"rebalancing move to {move.target} abandoned: the session changed meanwhile"
        self.link.close_session_at(*left)
        return f"rebalancing: moved {left[0]} -> {move.target} ({move.reason})"

    def request_once(self) -> bool:
        """Send one observation and wait for its chunk; False when nothing could be sent."""
        pending = self.core.start_request(self.clock(), self.clock_ns())
        if not isinstance(pending, PendingRequest):
            self._not_sent = True
            return False
        # a stop just before the request went in flight would otherwise be lost
        if self._stop_event.is_set():
            self.core.cancel_request()
            return False
        sent = self.core.complete_request(
            pending,
            self.link.send_observation(pending),
            self.clock,
            self._stop_event.is_set,
            hedge=self.link.send_observation,
            clock_ns=self.clock_ns,
        )
        self._not_sent = not sent
        return sent
