"""Which checkpoint a policy name means (the demo, the evaluation, the launch files and the fleet
demo ask here)."""

import json

from lerobot_ros.policy_names import (
    EVALUATION_FILE,
    auto_policy,
    checkpoint_or_default,
    committed_trained_smolvla,
    installed_trained_policy,
    trained_policy_path,
)
from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE


def test_an_explicit_checkpoint_is_used_as_given():
    assert checkpoint_or_default("/ckpt/act", "act") == "/ckpt/act"


def test_the_trained_smolvla_policy_is_the_one_committed_with_the_package():
    assert checkpoint_or_default("", "trained_smolvla") == str(committed_trained_smolvla())


def test_auto_serves_the_trained_act_only_once_it_is_whole_and_evaluated(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(tmp_path))
    assert auto_policy() == "trained_smolvla"
    target = trained_policy_path()
    target.mkdir(parents=True)
    # an install interrupted before its evaluation was written
    (target / CONTRACT_FILE).write_text("{}")
    assert installed_trained_policy() is None and auto_policy() == "trained_smolvla"
    (target / EVALUATION_FILE).write_text(json.dumps({"successes": 1}))
    assert installed_trained_policy() == target and auto_policy() == "trained"
