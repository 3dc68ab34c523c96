"""The policy server's lifecycle transitions: what each one does, and in which order.

Invariants:

* configure runs its steps in order (read and validate the parameters, load
  and warm up the policy, refuse to become a second server on the namespace,
  open the audit log, capture and HTTP endpoint, create the ROS entities);
  a step that fails is the transition's reason, and whatever the earlier
  steps acquired is released, newest first, so a failed configure holds
  nothing and the node can be configured again;
* activate starts serving (a fresh scheduler and inference worker, then the
  heartbeat says ready); deactivate refuses new sessions first, then drains
  (the last heartbeat announces it, the request in flight is answered, the
  waiting ones are refused, the sessions are closed); activate again serves
  with the same loaded policy;
* cleanup releases everything configure acquired, newest first; shutdown
  from any state deactivates when serving, then cleans up; each runs once,
  whichever of the lifecycle service, a signal or the node's destruction
  asks first.

Plain Python: ``ServerParts`` is the node's side (ROS, torch); tests drive
this module with their own parts.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Protocol

from lerobot_ros.node_shell.node_support import TransitionFailed

Release = Callable[[], None]


class Stage(enum.Enum):
    """Where the server is in its lifecycle (the labels are ROS's primary states)."""

    UNCONFIGURED = "unconfigured"
    INACTIVE = "inactive"
    ACTIVE = "active"
    FINALIZED = "finalized"


class ServerParts(Protocol):
    """The node's steps; an acquiring step returns how to release what it acquired."""

    def read_settings(self) -> None: ...
    def load_policy(self) -> Release: ...
    def refuse_a_second_instance(self) -> None: ...
    def open_observability(self) -> Release: ...
    def create_entities(self) -> Release: ...
    def start_serving(self) -> None: ...
    def refuse_new_sessions(self) -> None: ...
    def drain_serving(self) -> None: ...


def not_serving_reason(stage: Stage) -> str:
    """The OpenSession refusal while the server does not serve: which state, and what would change
    it."""
    if stage is Stage.INACTIVE:
        return (
            "the server is inactive (lifecycle state 'inactive'): it serves again once activated "
            "(ros2 lifecycle set <node> activate); try another replica meanwhile"
        )
    return f"the server is not serving (lifecycle state '{stage.value}'); try another replica"


class ServerLifecycle:
    """The transitions of one server; each returns None when done or the reason it failed."""

    def __init__(self, parts: ServerParts) -> None:
        self._parts = parts
        self._held: list[Release] = []  # what configure acquired, oldest first
        self.stage = Stage.UNCONFIGURED

    @property
    def serving(self) -> bool:
        return self.stage is Stage.ACTIVE

    def configure(self) -> str | None:
        if self.stage is not Stage.UNCONFIGURED:
            return f"configure needs the unconfigured state; the server is {self.stage.value}"
        parts = self._parts
        steps: tuple[Callable[[], Release | None], ...] = (
            parts.read_settings,
            parts.load_policy,
            parts.refuse_a_second_instance,
            parts.open_observability,
            parts.create_entities,
        )
        try:
            for step in steps:
                release = step()
                if release is not None:
                    self._held.append(release)
        except TransitionFailed as failure:
            self._release()
            return str(failure)
        except BaseException:  # a bug, or Ctrl-C during loading: nothing stays held either
            self._release()
            raise
        self.stage = Stage.INACTIVE
        return None

    def activate(self) -> str | None:
        if self.stage is not Stage.INACTIVE:
            return f"activate needs the inactive state; the server is {self.stage.value}"
        self._parts.start_serving()
        self.stage = Stage.ACTIVE
        return None

    def deactivate(self) -> str | None:
        if self.stage is not Stage.ACTIVE:
            return f"deactivate needs the active state; the server is {self.stage.value}"
        self.stage = Stage.INACTIVE  # from here on, a session request is refused with the state
        self._parts.refuse_new_sessions()
        self._parts.drain_serving()
        return None

    def cleanup(self) -> str | None:
        if self.stage is not Stage.INACTIVE:
            return f"cleanup needs the inactive state; the server is {self.stage.value}"
        self._release()
        self.stage = Stage.UNCONFIGURED
        return None

    def shutdown(self) -> None:
        """From any state: stop serving, release everything; later calls do nothing."""
        self.recover()
        self.stage = Stage.FINALIZED

    def recover(self) -> None:
        """Back to unconfigured holding nothing (after a transition raised, as ROS's error
        processing does)."""
        if self.stage is Stage.ACTIVE:
            self.deactivate()
        if self.stage is Stage.INACTIVE:
            self.cleanup()

    def _release(self) -> None:
        while self._held:
            self._held.pop()()
