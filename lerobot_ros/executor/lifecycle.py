"""What each lifecycle transition of chunk_executor_node does, and in which order.

    unconfigured --configure--> inactive --activate--> active
    active --deactivate--> inactive --cleanup--> unconfigured
    any of them --shutdown--> finalized

* configure: validate every parameter, then handshake (server found, model
  validated, session open), then create the ROS entities; nothing is
  commanded yet. A failed step undoes the ones before it (a failed configure
  leaves nothing behind) and says why;
* activate: the first time, start the network worker and the control loop
  (streaming begins); after a deactivation, let go of the lifecycle's hold
  and open a new session;
* deactivate: hold first (from this moment the control loop publishes only
  the "hold" fallback), then drop the queue and close the session; the
  threads keep running, so the robot keeps being held;
* cleanup, shutdown: close the session if one is open, stop the threads,
  destroy the entities: everything configure acquired is released.

Every step's exception becomes a failed transition with its reason (never a
crash). Plain Python: the node implements ``ExecutorParts`` with ROS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from lerobot_ros.node_shell.node_support import TransitionFailed

#: rclpy's label of the state each transition (by the node's name for it) passes through, ends in
#: when it succeeds, and ends in when it fails; a failed cleanup or shutdown goes through
#: errorprocessing.
STATE_LABELS = {
    "configure": ("configuring", "inactive", "unconfigured"),
    "activate": ("activating", "active", "inactive"),
    "deactivate": ("deactivating", "inactive", "active"),
    "cleanup": ("cleaningup", "unconfigured", "errorprocessing"),
    "shutdown": ("shuttingdown", "finalized", "errorprocessing"),
    "release after an error": ("errorprocessing", "unconfigured", "unconfigured"),
}


class ExecutorParts(Protocol):
    """The node's side of each step."""

    def read_settings(
        self,
    ) -> None: ...  # validate every parameter (TransitionFailed lists the problems)

    def connect(self) -> None: ...  # the first handshake (TransitionFailed with the refusal)

    def create_entities(self) -> None: ...  # subscriptions, publishers, services, timers

    def start_streaming(self) -> None: ...  # network worker and control loop

    def hold(self) -> None: ...  # the control loop publishes only the "hold" fallback from now

    def close_session(self) -> None: ...  # queue dropped, session closed on the server (bounded)

    def resume(self) -> None: ...  # let go of the hold, open a new session

    def stop_streaming(self) -> None: ...  # the threads end (bounded joins)

    def destroy_entities(self) -> None: ...  # including the session's data plane and clients

    def forget_settings(
        self,
    ) -> None: ...  # the core and settings of this configuration are dropped


@dataclass(frozen=True)
class TransitionOutcome:
    """How one lifecycle transition went: done, or failed with the reason."""

    ok: bool
    reason: str = ""


class ExecutorLifecycle:
    """Runs the steps of each transition on ``parts``, tracking what is acquired."""

    def __init__(self, parts: ExecutorParts) -> None:
        self.parts = parts
        self.configured = False  # settings, session and entities exist
        self.streaming = False  # the threads run
        self.session_open = False
        self.active = False

    def configure(self) -> TransitionOutcome:
        steps = (
            ("parameters", self.parts.read_settings),
            ("handshake", self.parts.connect),
            ("entities", self.parts.create_entities),
        )
        for name, step in steps:
            try:
                step()
            except Exception as error:  # noqa: BLE001 - every failure is a failed transition with its reason
                self._release(after_failed=name)
                return TransitionOutcome(False, reason_of(error))
            if name == "handshake":
                self.session_open = True
        self.configured = True
        return TransitionOutcome(True, "session open, nothing commanded until activate")

    def activate(self) -> TransitionOutcome:
        try:
            if not self.streaming:
                self.parts.start_streaming()
                self.streaming = True
            else:
                self.parts.resume()
            self.session_open = True
        except Exception as error:  # noqa: BLE001
            return TransitionOutcome(False, reason_of(error))
        self.active = True
        return TransitionOutcome(True, "streaming")

    def deactivate(self) -> TransitionOutcome:
        try:
            if self.streaming:
                self.parts.hold()
            self.active = False
            self._close_session()
        except Exception as error:  # noqa: BLE001
            return TransitionOutcome(False, reason_of(error))
        return TransitionOutcome(True, "holding position, session closed")

    def cleanup(self) -> TransitionOutcome:
        return self.release()

    def shutdown(self) -> TransitionOutcome:
        return self.release()

    def release(self) -> TransitionOutcome:
        """Release whatever is acquired, from any state (cleanup, shutdown, the error handler)."""
        problems = self._release()
        if problems:
            return TransitionOutcome(False, "; ".join(problems))
        return TransitionOutcome(True, "session closed, threads stopped, entities released")

    def _close_session(self) -> None:
        if self.session_open:
            self.session_open = False
            self.parts.close_session()

    def _release(self, after_failed: str | None = None) -> list[str]:
        """Undo whatever was acquired (every step tried, whatever the others do); the problems
        met."""
        steps = []
        if self.streaming:
            steps.append(self.parts.hold)
        if after_failed != "parameters":
            steps.append(self._close_session)
        if self.streaming:
            steps.append(self.parts.stop_streaming)
        if after_failed != "parameters":
            steps.append(self.parts.destroy_entities)
        steps.append(self.parts.forget_settings)
        problems = []
        for step in steps:
            try:
                step()
            except Exception as error:  # noqa: BLE001
                problems.append(reason_of(error))
        self.configured = self.streaming = self.session_open = self.active = False
        return problems


def reason_of(error: BaseException) -> str:
    return (
        str(error) if isinstance(error, TransitionFailed) else f"{type(error).__name__}: {error}"
    )
