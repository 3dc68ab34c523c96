"""The session contract: refusals name what was expected and what arrived."""

from lerobot_ros.msg import Observation
from lerobot_ros.protocol.contract import (
    SCHEMA_VERSION,
    CameraSpec,
    ServerCapabilities,
    action_names_mismatch,
    check_robot,
)

JOINTS = ("shoulder_pan", "shoulder_lift", "elbow_flex")


def capabilities(**overrides) -> ServerCapabilities:
    fields = dict(
        model_id="ckpt",
        model_fingerprint="abc",
        policy_type="act",
        action_names=JOINTS,
        state_dim=3,
        cameras=(CameraSpec("observation.images.front", 96, 128),),
        chunk_size=50,
    )
    fields.update(overrides)
    return ServerCapabilities(**fields)


def test_identical_names_match():
    assert action_names_mismatch(JOINTS, list(JOINTS)) is None


def test_swapped_order_is_refused_with_both_lists_and_the_first_difference():
    message = action_names_mismatch(JOINTS, ("shoulder_lift", "shoulder_pan", "elbow_flex"))
    assert "different order" in message
    assert "index 0" in message
    assert str(list(JOINTS)) in message
    assert "['shoulder_lift', 'shoulder_pan', 'elbow_flex']" in message


def test_wrong_count_and_wrong_names_are_explained():
    assert "3 names expected, 2 arrived" in action_names_mismatch(JOINTS, JOINTS[:2])
    message = action_names_mismatch(JOINTS, ("shoulder_pan", "shoulder_lift", "wrist"))
    assert "missing ['elbow_flex']" in message and "unexpected ['wrist']" in message


def test_check_robot_reports_every_problem():
    check = check_robot(
        capabilities(), JOINTS[::-1], camera_names=["observation.images.wrist"], state_dim=4
    )
    assert not check.ok
    assert len(check.problems) == 3
    assert "cameras missing: ['observation.images.front']" in check.message()
    assert "policy expects 3, robot sends 4" in check.message()


def test_check_robot_skips_what_the_robot_did_not_declare():
    assert check_robot(capabilities(), JOINTS).ok
    assert check_robot(
        capabilities(), JOINTS, camera_names=["observation.images.front", "extra"], state_dim=3
    ).ok


def test_the_schema_version_is_the_one_the_interface_declares():
    assert SCHEMA_VERSION == Observation.CURRENT_SCHEMA_VERSION
