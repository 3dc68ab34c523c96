"""The network worker: handshakes and the one-request-in-flight cycle.

Invariants:

* exactly one request in flight: the worker publishes one observation, then
  waits (up to ``request_timeout_s``) for the chunk answering exactly it,
  merges it, and only then may send the next;
* it never runs on the control timer's thread, so no network wait can delay
  a command;
* every re-handshake checks the server's model against the FIRST one before
  opening a session: a different model is never executed (DEAD).

Plain Python: everything ROS goes through a ``ServerLink`` (the node's
service clients and data plane topics), so tests drive the cycle with a fake.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from lerobot_ros.contract import ServerCapabilities
from lerobot_ros.executor.core import ExecutorCore, PreparedRequest, SessionGrant
from lerobot_ros.executor.handshake import HandshakeResult, RobotDeclaration, evaluate


@dataclass(frozen=True)
class ServerView:
    """A GetStatus answer, as plain values."""

    ready: bool
    instance_id: str
    capabilities: ServerCapabilities


class ServerLink(Protocol):
    """What the worker needs from ROS. Each call is bounded by ``timeout_s``; errors are returned as text."""

    def get_status(self, timeout_s: float) -> ServerView | str: ...

    def open_session(self, timeout_s: float) -> SessionGrant | str: ...

    def connect_data_plane(self, grant: SessionGrant, timeout_s: float) -> str | None: ...

    def send_observation(self, prepared: PreparedRequest) -> str | None: ...


def handshake(core: ExecutorCore, link: ServerLink, robot: RobotDeclaration, clock: Callable[[], float]) -> HandshakeResult:
    """GetStatus, contract and model checks, OpenSession, data plane; reports to the core.

    Used for the first handshake (at start-up) and every re-handshake.
    """
    timeout = core.settings.handshake_timeout_s
    view = link.get_status(timeout)
    if isinstance(view, str):
        core.handshake_failed(view, clock())
        return HandshakeResult(False, view)
    # A re-handshaken server serving another model is DEAD, not merely a mismatch to retry.
    changed = core.check_model(view.capabilities, clock())
    if changed:
        return HandshakeResult(False, changed, view.instance_id, view.capabilities.model_fingerprint)
    checked = evaluate(robot, view.capabilities, view.ready, view.instance_id)
    if not checked.accepted:
        core.handshake_failed(checked.reason, clock())
        return checked
    grant = link.open_session(timeout)
    if isinstance(grant, str):
        core.handshake_failed(grant, clock())
        return HandshakeResult(False, grant, view.instance_id, view.capabilities.model_fingerprint)
    # The session's capabilities are what the server validated us against: check them too.
    changed = core.check_model(grant.capabilities, clock())
    if changed:
        return HandshakeResult(False, changed, view.instance_id, grant.capabilities.model_fingerprint)
    problem = link.connect_data_plane(grant, timeout)
    if problem:
        core.handshake_failed(problem, clock())
        return HandshakeResult(False, problem, view.instance_id, grant.capabilities.model_fingerprint)
    core.session_opened(grant, view.instance_id, clock())
    return HandshakeResult(
        True, "session opened", view.instance_id, grant.capabilities.model_fingerprint, grant.capabilities.policy_type
    )


class NetworkWorker(threading.Thread):
    """Runs re-handshakes and requests until ``stop``; never touches the control path."""

    def __init__(self, core: ExecutorCore, link: ServerLink, robot: RobotDeclaration,
                 clock: Callable[[], float] = time.monotonic, clock_ns: Callable[[], int] = time.monotonic_ns,
                 log: Callable[[str], None] = lambda text: None) -> None:
        super().__init__(name="lerobot_ros_network_worker", daemon=True)
        self.core, self.link, self.robot = core, link, robot
        self.clock, self.clock_ns, self.log = clock, clock_ns, log
        self._stop_event = threading.Event()
        # Poll twice per control period while idle: the trigger is at most half a period late.
        self.idle_s = 0.5 / core.settings.fps

    def stop(self) -> None:
        self._stop_event.set()
        stopping = getattr(self.link, "stopping", None)
        if stopping is not None:
            stopping.set()
        self.core.in_flight.cancel()

    @property
    def stopping(self) -> bool:
        return self._stop_event.is_set()

    def run(self) -> None:
        while not self._stop_event.is_set():
            if not self.step():
                self._stop_event.wait(self.idle_s)

    def step(self) -> bool:
        """One unit of work; False when there was nothing to do (the caller idles)."""
        now = self.clock()
        if self.core.reconnect_due(now):
            result = handshake(self.core, self.link, self.robot, self.clock)
            self.log(f"re-handshake: {'accepted' if result.accepted else 'failed'}: {result.reason}")
            return True
        if self.core.request_due(now):
            return self.request_once()
        return False

    def request_once(self) -> bool:
        """Send one observation and wait for its chunk; False when nothing could be sent."""
        prepared = self.core.prepare_request(self.clock(), self.clock_ns())
        if not isinstance(prepared, PreparedRequest):
            return False
        self.core.in_flight.start(prepared.request)
        if self._stop_event.is_set():  # a stop between prepare and start would otherwise be lost
            self.core.in_flight.cancel()
            return False
        problem = self.link.send_observation(prepared)
        if problem:
            self.core.in_flight.cancel()
            self.core.last_problem = problem
            return False
        answer = self.core.in_flight.wait(self.core.settings.request_timeout_s)
        if answer.chunk is not None:
            self.core.merge(prepared, answer.chunk, answer.received_ns, self.clock())
        elif answer.refusal and not self._stop_event.is_set():
            self.core.on_request_refused(answer.refusal, self.clock())
        elif answer.timed_out and not self._stop_event.is_set():
            self.core.on_request_timeout(self.clock())
        return True
