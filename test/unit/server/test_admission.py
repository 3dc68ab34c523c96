"""The capability matrix of OpenSession, case by case (no ROS)."""

import dataclasses

import pytest

from lerobot_ros.protocol.contract import (
    SCHEMA_VERSION,
    CameraSpec,
    OpenRequest,
    ServerCapabilities,
    client_id_problem,
    sanitize_client_id,
)
from lerobot_ros.server.sessions.open_checks import (
    Refusal,
    ServerLoad,
    admit,
)
from lerobot_ros.srv import OpenSession

NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
CAPABILITIES = ServerCapabilities(
    model_id="ckpt",
    model_fingerprint="abc",
    policy_type="act",
    action_names=NAMES,
    state_dim=6,
    cameras=(CameraSpec("observation.images.front", 96, 128),),
    chunk_size=50,
    trained_fps=30.0,
)
ROBOT = OpenRequest("arm_1", SCHEMA_VERSION, NAMES, 6, ("observation.images.front",), 30.0)
ROOM = ServerLoad(ready=True, draining=False, active_sessions=0, max_sessions=2)


def test_refusal_codes_equal_the_service_constants():
    for refusal in Refusal:
        assert getattr(OpenSession.Response, f"REFUSAL_{refusal.name}") == refusal.value


@pytest.mark.parametrize(
    ("change", "load", "refusal", "in_message"),
    [
        ({}, ROOM, Refusal.NONE, ""),
        ({}, dataclasses.replace(ROOM, ready=False), Refusal.NOT_READY, "loading"),
        ({}, dataclasses.replace(ROOM, draining=True), Refusal.DRAINING, "shutting down"),
        ({}, dataclasses.replace(ROOM, active_sessions=2), Refusal.CAPACITY, "2 of 2 sessions"),
        ({"client_id": "9lives"}, ROOM, Refusal.BAD_CLIENT_ID, "not a valid ROS name segment"),
        ({"client_id": "arm/1"}, ROOM, Refusal.BAD_CLIENT_ID, "'arm/1'"),
        ({"client_id": ""}, ROOM, Refusal.BAD_CLIENT_ID, "empty"),
        ({"client_id": "a" * 65}, ROOM, Refusal.BAD_CLIENT_ID, "65 characters"),
        (
            {"schema_version": 1},
            ROOM,
            Refusal.SCHEMA_VERSION,
            "expected 4..4 (the robot speaks lerobot_ros interfaces of schema version 1, this "
            "server schema version 4",
        ),
        ({"action_names": NAMES[::-1]}, ROOM, Refusal.ACTION_NAMES, str(list(NAMES))),
        ({"action_names": NAMES[:5]}, ROOM, Refusal.ACTION_NAMES, "6 names expected, 5 arrived"),
        ({"state_dim": 7}, ROOM, Refusal.STATE_DIM, "policy expects 6, robot sends 7"),
        (
            {"camera_names": ("observation.images.wrist",)},
            ROOM,
            Refusal.CAMERAS,
            "observation.images.front",
        ),
        ({"fps": 0.0}, ROOM, Refusal.FPS, "positive"),
    ],
)
def test_capability_matrix(change, load, refusal, in_message):
    admission = admit(CAPABILITIES, dataclasses.replace(ROBOT, **change), load)
    assert admission.refusal == refusal
    assert admission.accepted == (refusal == Refusal.NONE)
    assert in_message in admission.message


def test_refused_action_order_message_shows_both_lists():
    admission = admit(CAPABILITIES, dataclasses.replace(ROBOT, action_names=NAMES[::-1]), ROOM)
    assert str(list(NAMES)) in admission.message and str(list(NAMES[::-1])) in admission.message


def test_fps_mismatch_warns_and_refuses_when_strict():
    robot = dataclasses.replace(ROBOT, fps=50.0)
    relaxed = admit(CAPABILITIES, robot, ROOM)
    assert relaxed.accepted and "50 Hz" in relaxed.warnings[0] and "30 Hz" in relaxed.warnings[0]
    strict = admit(CAPABILITIES, robot, ROOM, strict_fps=True)
    assert strict.refusal == Refusal.FPS and "strict_fps" in strict.message


def test_pinned_task_refuses_other_tasks_and_fills_an_empty_one():
    pinned = dataclasses.replace(CAPABILITIES, pinned_task="pick the cube")
    refused = admit(pinned, dataclasses.replace(ROBOT, task="stack cups"), ROOM)
    assert (
        refused.refusal == Refusal.TASK
        and "pick the cube" in refused.message
        and "stack cups" in refused.message
    )
    assert admit(pinned, ROBOT, ROOM).task == "pick the cube"


@pytest.mark.parametrize(
    ("supported", "enabled", "rtc", "warning"),
    [
        (False, False, False, "cannot condition"),
        (True, False, False, "disabled"),
        (True, True, True, None),
    ],
)
def test_rtc_request_is_accepted_and_downgraded_with_a_warning(supported, enabled, rtc, warning):
    capabilities = dataclasses.replace(CAPABILITIES, rtc_supported=supported, rtc_enabled=enabled)
    admission = admit(capabilities, dataclasses.replace(ROBOT, rtc_requested=True), ROOM)
    assert admission.accepted and admission.rtc_enabled is rtc
    assert (warning in admission.warnings[0]) if warning else not admission.warnings


def test_client_ids_are_sanitized_into_valid_segments():
    for name in ("/robots/arm-1", "9lives", "arm 1!", "", "___"):
        assert client_id_problem(sanitize_client_id(name)) is None, name
    assert sanitize_client_id("/robots/arm-1") == "robots_arm_1"


def test_a_camera_the_policy_does_not_read_is_accepted_with_a_warning_that_it_is_ignored():
    robot = dataclasses.replace(
        ROBOT, camera_names=(*ROBOT.camera_names, "observation.images.wrist")
    )
    admission = admit(CAPABILITIES, robot, ROOM)
    assert admission.accepted
    assert admission.warnings == (
        "cameras ['observation.images.wrist'] are not read by the policy: the executor "
        "leaves them out of its observations and the server ignores them",
    )
