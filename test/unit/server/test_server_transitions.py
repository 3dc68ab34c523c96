"""server/lifecycle.py: the order of each transition's steps, releases on failure, refusals out of
turn."""

from __future__ import annotations

import pytest

from lerobot_ros.server.lifecycle import (
    ServerLifecycle,
    Stage,
    TransitionFailed,
    not_serving_reason,
)


class RecordingParts:
    """The node's steps as a log of what ran; ``fail_at`` makes that step fail with a reason."""

    def __init__(self, fail_at: str = "") -> None:
        self.log: list[str] = []
        self.fail_at = fail_at

    def _step(self, name: str, releases: bool):
        self.log.append(name)
        if name == self.fail_at:
            raise TransitionFailed(f"{name} could not be done")
        return (lambda: self.log.append(f"release {name}")) if releases else None

    def read_settings(self):
        return self._step("read_settings", False)

    def load_policy(self):
        return self._step("load_policy", True)

    def refuse_a_second_instance(self):
        return self._step("refuse_a_second_instance", False)

    def open_observability(self):
        return self._step("open_observability", True)

    def create_entities(self):
        return self._step("create_entities", True)

    def start_serving(self):
        self.log.append("start_serving")

    def refuse_new_sessions(self):
        self.log.append("refuse_new_sessions")

    def drain_serving(self):
        self.log.append("drain_serving")


CONFIGURE = [
    "read_settings",
    "load_policy",
    "refuse_a_second_instance",
    "open_observability",
    "create_entities",
]
RELEASE_ALL = ["release create_entities", "release open_observability", "release load_policy"]


def test_every_transition_runs_its_steps_in_order_and_cleanup_releases_newest_first():
    parts = RecordingParts()
    lifecycle = ServerLifecycle(parts)
    assert (
        lifecycle.configure() is None
        and lifecycle.stage is Stage.INACTIVE
        and not lifecycle.serving
    )
    assert lifecycle.activate() is None and lifecycle.serving
    assert lifecycle.deactivate() is None and lifecycle.stage is Stage.INACTIVE
    # the loaded policy serves again
    assert lifecycle.activate() is None and lifecycle.deactivate() is None
    assert lifecycle.cleanup() is None and lifecycle.stage is Stage.UNCONFIGURED
    assert (
        parts.log
        == CONFIGURE + ["start_serving", "refuse_new_sessions", "drain_serving"] * 2 + RELEASE_ALL
    )


@pytest.mark.parametrize("failing", CONFIGURE)
def test_a_failed_configure_gives_its_reason_and_releases_what_the_earlier_steps_acquired(failing):
    parts = RecordingParts(fail_at=failing)
    lifecycle = ServerLifecycle(parts)
    assert lifecycle.configure() == f"{failing} could not be done"
    assert lifecycle.stage is Stage.UNCONFIGURED
    done = CONFIGURE[: CONFIGURE.index(failing) + 1]
    assert parts.log == done + [
        release for release in RELEASE_ALL if release.removeprefix("release ") in done[:-1]
    ]
    parts.fail_at, parts.log = "", []
    assert lifecycle.configure() is None  # nothing stayed held: it can be configured again


def test_an_exception_in_configure_releases_too_and_propagates():
    parts = RecordingParts()
    parts.create_entities = lambda: (_ for _ in ()).throw(KeyboardInterrupt)
    lifecycle = ServerLifecycle(parts)
    with pytest.raises(KeyboardInterrupt):
        lifecycle.configure()
    assert parts.log[-2:] == ["release open_observability", "release load_policy"]
    assert lifecycle.stage is Stage.UNCONFIGURED


def test_a_transition_out_of_turn_is_refused_with_the_state_it_needs():
    lifecycle = ServerLifecycle(RecordingParts())
    assert lifecycle.activate() == "activate needs the inactive state; the server is unconfigured"
    assert lifecycle.cleanup() == "cleanup needs the inactive state; the server is unconfigured"
    lifecycle.configure()
    assert lifecycle.deactivate() == "deactivate needs the active state; the server is inactive"
    assert (
        lifecycle.configure() == "configure needs the unconfigured state; the server is inactive"
    )


def test_shutdown_from_active_drains_then_releases_once():
    parts = RecordingParts()
    lifecycle = ServerLifecycle(parts)
    lifecycle.configure()
    lifecycle.activate()
    parts.log = []
    lifecycle.shutdown()
    lifecycle.shutdown()  # the signal's drain, then destroy_node: nothing twice
    assert parts.log == ["refuse_new_sessions", "drain_serving"] + RELEASE_ALL
    assert lifecycle.stage is Stage.FINALIZED


def test_the_refusal_while_not_serving_names_the_state_and_how_to_serve_again():
    assert "lifecycle state 'inactive'" in not_serving_reason(Stage.INACTIVE)
    assert "activate" in not_serving_reason(Stage.INACTIVE)
    assert "lifecycle state 'finalized'" in not_serving_reason(Stage.FINALIZED)
