"""Loading and describing checkpoints (real LeRobot, no ROS graph)."""

import json
import shutil

import pytest

from lerobot_ros.server.policy.checkpoint import (
    CONTRACT_FILE,
    CheckpointError,
    fingerprint,
    load_policy,
)
from lerobot_ros.server.policy.policy_families import (
    EXCLUSIVE,
    SHARED,
    UnsupportedPolicyError,
    classify,
    resolve_serving,
)
from lerobot_ros.sim.default_policy import build_act_checkpoint
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES


@pytest.mark.parametrize(
    ("policy_type", "n_obs_steps", "mode"),
    [
        ("act", 1, SHARED),
        ("pi0", 1, SHARED),
        ("pi05", 1, SHARED),
        ("smolvla", 1, SHARED),
        ("smolvla", 2, EXCLUSIVE),
        ("diffusion", 2, EXCLUSIVE),
    ],
)
def test_policy_families_are_classified(policy_type, n_obs_steps, mode):
    serving = classify(policy_type, n_obs_steps)
    assert serving.mode == mode
    assert policy_type in serving.reason


def test_unknown_family_is_refused_with_the_supported_list():
    with pytest.raises(
        UnsupportedPolicyError, match=r"'tdmpc' cannot be served.*supported types are \['act'"
    ):
        classify("tdmpc")


def test_operator_serving_mode_can_force_exclusive_but_never_unsafe_sharing():
    assert resolve_serving(classify("act"), "auto").mode == SHARED
    forced = resolve_serving(classify("act"), "exclusive")
    assert forced.mode == EXCLUSIVE and "forced" in forced.reason
    assert resolve_serving(classify("diffusion", 2), "exclusive").mode == EXCLUSIVE
    with pytest.raises(
        UnsupportedPolicyError,
        match="serving_mode=shared is unsafe here: diffusion keeps observation history",
    ):
        resolve_serving(classify("diffusion", 2), "shared")


def test_loaded_act_is_described_from_the_checkpoint(act_checkpoint):
    capabilities = load_policy(str(act_checkpoint), device="cpu").capabilities
    assert capabilities.action_names == SO101_JOINT_NAMES
    assert capabilities.state_names == SO101_JOINT_NAMES
    assert (capabilities.policy_type, capabilities.serving_mode, capabilities.device) == (
        "act",
        SHARED,
        "cpu",
    )
    assert (capabilities.state_dim, capabilities.chunk_size, capabilities.trained_fps) == (
        6,
        50,
        30.0,
    )


def test_fingerprint_is_stable_and_tells_training_runs_apart(act_checkpoint, tmp_path):
    assert fingerprint(act_checkpoint) == fingerprint(act_checkpoint)
    assert fingerprint(act_checkpoint, revision="v2") != fingerprint(act_checkpoint)
    other = build_act_checkpoint(tmp_path / "other_seed", seed=1)
    assert fingerprint(other) != fingerprint(act_checkpoint)


def test_action_names_come_from_the_parameter_or_the_contract_file(act_checkpoint, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(act_checkpoint, bare)
    (bare / CONTRACT_FILE).unlink()
    with pytest.raises(
        CheckpointError,
        match="does not name its 6 actions: pass the ordered action_names parameter",
    ):
        load_policy(str(bare), device="cpu")
    names = [f"joint_{i}" for i in range(6)]
    assert load_policy(
        str(bare), device="cpu", action_names=names
    ).capabilities.action_names == tuple(names)
    with pytest.raises(
        CheckpointError, match=r"2 action names given \(\['a', 'b'\]\) but the policy outputs 6"
    ):
        load_policy(str(bare), device="cpu", action_names=["a", "b"])


def test_corrupt_contract_file_is_named(act_checkpoint, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(act_checkpoint, broken)
    (broken / CONTRACT_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match=f"{CONTRACT_FILE} is not valid JSON"):
        load_policy(str(broken), device="cpu")
    assert json.loads((act_checkpoint / CONTRACT_FILE).read_text())["action_names"] == list(
        SO101_JOINT_NAMES
    )
