"""Opening a session as one decision: admission first, then the client id's claim (no ROS)."""

import dataclasses

from lerobot_ros.protocol.contract import (
    SCHEMA_VERSION,
    CameraSpec,
    OpenRequest,
    ServerCapabilities,
)
from lerobot_ros.server.sessions.open_checks import Refusal, ServerLoad
from lerobot_ros.server.sessions.registry import SessionRegistry
from lerobot_ros.server.sessions.session_opening import decide_open
from lerobot_ros.server.settings import ServerSettings

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
SETTINGS = ServerSettings.from_values({"checkpoint": "/ckpt", "default_task": "reach the cube"})


def test_an_admitted_robot_gets_a_registered_session_with_the_default_task():
    sessions = SessionRegistry()
    decision = decide_open(ROBOT, "", CAPABILITIES, ROOM, sessions, SETTINGS, now_s=10.0)
    assert decision.refusal is Refusal.NONE and decision.session is not None
    assert sessions.get("arm_1") is decision.session
    assert decision.session.task == "reach the cube" and decision.session.opened_at == 10.0
    assert not decision.replaced


def test_a_refused_robot_leaves_the_registry_untouched_and_is_told_why():
    sessions = SessionRegistry()
    wrong_order = dataclasses.replace(ROBOT, action_names=tuple(reversed(NAMES)))
    decision = decide_open(wrong_order, "", CAPABILITIES, ROOM, sessions, SETTINGS)
    assert decision.session is None and decision.refusal is Refusal.ACTION_NAMES
    assert "shoulder_pan" in decision.message
    assert sessions.count() == 0


def test_a_full_server_says_when_a_slot_frees():
    sessions = SessionRegistry()
    decide_open(
        dataclasses.replace(ROBOT, client_id="arm_0"), "", CAPABILITIES, ROOM, sessions, SETTINGS
    )
    full = dataclasses.replace(ROOM, active_sessions=2)
    decision = decide_open(ROBOT, "", CAPABILITIES, full, sessions, SETTINGS)
    assert decision.refusal is Refusal.CAPACITY
    assert "a slot frees in" in decision.message and decision.active_sessions == 2


def test_a_client_id_streaming_elsewhere_is_refused_without_its_secret_and_replaced_with_it():
    sessions = SessionRegistry()
    first = decide_open(ROBOT, "", CAPABILITIES, ROOM, sessions, SETTINGS).session
    first.last_seq = 1  # it has streamed: only its owner may take the client id now
    squatter = decide_open(
        ROBOT, "guess", CAPABILITIES, ROOM, sessions, SETTINGS, now_s=first.opened_at
    )
    assert squatter.refusal is Refusal.CLIENT_ID_IN_USE and squatter.session is None
    assert sessions.get("arm_1") is first
    owner = decide_open(
        ROBOT, first.secret, CAPABILITIES, ROOM, sessions, SETTINGS, now_s=first.opened_at
    )
    assert owner.session is not None and owner.replaced
    assert sessions.get("arm_1") is owner.session


def test_a_standby_opens_as_one_and_a_streamed_session_is_armed_as_a_standby_again_only_by_its_owner():  # noqa: E501 - the test's id names what it checks
    sessions = SessionRegistry()
    waiting = decide_open(
        dataclasses.replace(ROBOT, standby=True),
        "",
        CAPABILITIES,
        ROOM,
        sessions,
        SETTINGS,
        now_s=10.0,
    ).session
    assert waiting is not None and waiting.standby and sessions.standby_count() == 1
    ordinary = decide_open(
        dataclasses.replace(ROBOT, client_id="arm_2"), "", CAPABILITIES, ROOM, sessions, SETTINGS
    ).session
    assert not ordinary.standby
    # promoted by a hedged request the other replica won
    waiting.last_seq, waiting.standby = (
        1,
        False,
    )
    stranger = decide_open(
        dataclasses.replace(ROBOT, standby=True),
        "",
        CAPABILITIES,
        ROOM,
        sessions,
        SETTINGS,
        now_s=11.0,
    )
    assert stranger.refusal is Refusal.CLIENT_ID_IN_USE and sessions.get("arm_1") is waiting
    rearmed = decide_open(
        dataclasses.replace(ROBOT, standby=True),
        waiting.secret,
        CAPABILITIES,
        ROOM,
        sessions,
        SETTINGS,
        now_s=20.0,
    )
    assert rearmed.replaced and rearmed.session.standby and rearmed.session.opened_at == 20.0
    assert sessions.get("arm_1") is rearmed.session and sessions.standby_count() == 1
