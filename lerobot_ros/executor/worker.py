"""The network worker: re-handshakes and the one-request-in-flight cycle.

Invariants:

* exactly one request in flight: the worker publishes one observation, then
  waits (up to ``request_timeout_s``) for the chunk answering exactly it,
  merges it, and only then may send the next; with a warm standby, a
  request late past the hedge deadline is also sent there (the same
  request's race, ``hedging.py``), and the first valid answer is merged;
* a lost replica with a usable standby moves the robot there at once
  (``promote_standby``), without a placement;
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
from lerobot_ros.executor.handshake import SessionOpener, handshake
from lerobot_ros.executor.handshake_types import RobotDeclaration
from lerobot_ros.executor.pending_request import PendingRequest


#: Longest single idle wait (seconds); the control tick's wake-up normally ends it first.
IDLE_WAIT_S = 1.0


class ServerLink(SessionOpener, Protocol):
    """The handshake's calls, and publishing one pending request's observation (an error is returned as text)."""

    def send_observation(self, pending: PendingRequest) -> str | None: ...


class NetworkWorker(threading.Thread):
    """Runs re-handshakes and requests until ``stop``; never touches the control path."""

    def __init__(self, core: ExecutorCore, link: ServerLink, robot: RobotDeclaration,
                 clock: Callable[[], float] = time.monotonic, clock_ns: Callable[[], int] = time.monotonic_ns,
                 log: Callable[[str], None] = lambda text: None) -> None:
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
                self._stop_event.wait(self.retry_s)  # every tick still says "due": do not listen to it
            else:
                self.core.wait_for_work(self.idle_s)

    def step(self) -> bool:
        """One unit of work; False when there was nothing to do, or a due request could not be sent."""
        self._not_sent = False
        now = self.clock()
        if self.core.reconnect_due(now):
            if self.core.promote_standby(now):  # a warm standby: no placement, the next request goes there
                self.log(f"serving replica lost: moved to the standby on {self.core.identity.replica}")
                return True
            with self.core.handshaking:  # an operator's resume may be handshaking: never two at once
                if not self.core.reconnect_due(self.clock()):
                    return True
                result = handshake(self.core, self.link, self.robot, self.clock)
            self.log(f"re-handshake: {'accepted' if result.accepted else 'failed'}: {result.reason}")
            return True
        if self.core.request_due(now):
            return self.request_once()
        return False

    def request_once(self) -> bool:
        """Send one observation and wait for its chunk; False when nothing could be sent."""
        pending = self.core.start_request(self.clock(), self.clock_ns())
        if not isinstance(pending, PendingRequest):
            self._not_sent = True
            return False
        if self._stop_event.is_set():  # a stop just before the request went in flight would otherwise be lost
            self.core.cancel_request()
            return False
        sent = self.core.complete_request(pending, self.link.send_observation(pending), self.clock,
                                          self._stop_event.is_set, hedge=self.link.send_observation,
                                          clock_ns=self.clock_ns)
        self._not_sent = not sent
        return sent
