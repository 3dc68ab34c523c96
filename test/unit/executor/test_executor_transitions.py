"""What each lifecycle transition of the executor does, in which order (lifecycle.py).

The parts are the ROS side; here they record the steps the lifecycle asks for
and fail where a test says, so the order and the release are checked exactly.
"""

from __future__ import annotations

import pytest

from lerobot_ros.executor.lifecycle import ExecutorLifecycle
from lerobot_ros.node_shell.node_support import TransitionFailed

STEPS = (
    "read_settings",
    "connect",
    "create_entities",
    "start_streaming",
    "hold",
    "close_session",
    "resume",
    "stop_streaming",
    "destroy_entities",
    "forget_settings",
)


class RecordingParts:
    def __init__(self, failing: dict[str, Exception] | None = None) -> None:
        self.calls: list[str] = []
        self.failing = failing or {}

    def __getattr__(self, name):
        if name not in STEPS:
            raise AttributeError(name)

        def step():
            self.calls.append(name)
            if name in self.failing:
                raise self.failing[name]

        return step


def test_configure_validates_then_handshakes_then_creates_entities_and_commands_nothing():
    parts = RecordingParts()
    lifecycle = ExecutorLifecycle(parts)
    outcome = lifecycle.configure()
    assert outcome.ok and parts.calls == ["read_settings", "connect", "create_entities"]
    assert lifecycle.configured and lifecycle.session_open and not lifecycle.streaming


def test_activate_streams_deactivate_holds_before_closing_and_activate_again_resumes():
    parts = RecordingParts()
    lifecycle = ExecutorLifecycle(parts)
    lifecycle.configure()
    parts.calls.clear()
    assert lifecycle.activate().ok and parts.calls == ["start_streaming"] and lifecycle.active
    parts.calls.clear()
    assert lifecycle.deactivate().ok
    assert parts.calls == ["hold", "close_session"], (
        "held before the session goes: no command but the fallback"
    )
    assert not lifecycle.active and not lifecycle.session_open and lifecycle.streaming
    parts.calls.clear()
    assert lifecycle.activate().ok and parts.calls == ["resume"], "threads kept; a new session"
    assert lifecycle.session_open and lifecycle.active


@pytest.mark.parametrize("name", ["cleanup", "shutdown"])
def test_cleanup_and_shutdown_release_everything_in_order(name):
    parts = RecordingParts()
    lifecycle = ExecutorLifecycle(parts)
    lifecycle.configure()
    lifecycle.activate()
    parts.calls.clear()
    assert getattr(lifecycle, name)().ok
    assert parts.calls == [
        "hold",
        "close_session",
        "stop_streaming",
        "destroy_entities",
        "forget_settings",
    ]
    assert not (
        lifecycle.configured or lifecycle.streaming or lifecycle.session_open or lifecycle.active
    )


def test_cleanup_after_deactivate_does_not_close_the_closed_session_again():
    parts = RecordingParts()
    lifecycle = ExecutorLifecycle(parts)
    lifecycle.configure()
    lifecycle.activate()
    lifecycle.deactivate()
    parts.calls.clear()
    assert lifecycle.cleanup().ok
    assert parts.calls == ["hold", "stop_streaming", "destroy_entities", "forget_settings"]


def test_shutdown_of_an_unconfigured_node_only_forgets():
    parts = RecordingParts()
    assert ExecutorLifecycle(parts).shutdown().ok
    assert parts.calls == ["destroy_entities", "forget_settings"]


def test_invalid_parameters_fail_configure_with_the_problems_and_acquire_nothing():
    parts = RecordingParts({"read_settings": TransitionFailed("'fps' must be > 0, got -1.0")})
    lifecycle = ExecutorLifecycle(parts)
    outcome = lifecycle.configure()
    assert not outcome.ok and outcome.reason == "'fps' must be > 0, got -1.0"
    assert parts.calls == ["read_settings", "forget_settings"]
    assert not lifecycle.configured


def test_a_refused_handshake_fails_configure_and_undoes_the_clients():
    parts = RecordingParts({"connect": TransitionFailed("handshake refused: joint names differ")})
    lifecycle = ExecutorLifecycle(parts)
    outcome = lifecycle.configure()
    assert not outcome.ok and outcome.reason == "handshake refused: joint names differ"
    assert parts.calls == ["read_settings", "connect", "destroy_entities", "forget_settings"]
    assert not lifecycle.session_open


def test_an_unexpected_error_is_a_failed_transition_naming_it_never_a_crash():
    parts = RecordingParts({"close_session": RuntimeError("the server vanished")})
    lifecycle = ExecutorLifecycle(parts)
    lifecycle.configure()
    lifecycle.activate()
    outcome = lifecycle.deactivate()
    assert not outcome.ok and outcome.reason == "RuntimeError: the server vanished"


def test_release_tries_every_step_and_reports_each_problem():
    parts = RecordingParts(
        {
            "stop_streaming": RuntimeError("join timed out"),
            "destroy_entities": TransitionFailed("a timer would not go"),
        }
    )
    lifecycle = ExecutorLifecycle(parts)
    lifecycle.configure()
    lifecycle.activate()
    outcome = lifecycle.shutdown()
    assert (
        not outcome.ok and outcome.reason == "RuntimeError: join timed out; a timer would not go"
    )
    assert parts.calls[-1] == "forget_settings" and not lifecycle.configured


def test_a_failed_first_activation_leaves_the_node_inactive():
    parts = RecordingParts({"start_streaming": RuntimeError("no thread")})
    lifecycle = ExecutorLifecycle(parts)
    lifecycle.configure()
    outcome = lifecycle.activate()
    assert not outcome.ok and not lifecycle.active and not lifecycle.streaming
