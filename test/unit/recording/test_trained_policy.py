"""Installing the trained policy into the cache: whole, evaluated, never replaced (no ROS, no
torch)."""

from __future__ import annotations

import json

import pytest

from lerobot_ros.policy_names import EVALUATION_FILE, installed_trained_policy, trained_policy_path
from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.recording.trained_policy import evaluation_line, install_trained_policy

EVALUATION = {
    "episodes": 50,
    "successes": 43,
    "success_rate": 0.86,
    "time_to_success_s_median": 2.41,
    "seed": 100,
    "task_timeout_s": 10.0,
}


@pytest.fixture
def checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(tmp_path / "cache"))
    directory = tmp_path / "checkpoint"
    directory.mkdir()
    (directory / CONTRACT_FILE).write_text(json.dumps({"fps": 30}))
    (directory / "model.safetensors").write_bytes(b"weights")
    return directory


def test_an_installed_policy_is_whole_and_carries_its_score(checkpoint):
    assert installed_trained_policy() is None
    target = install_trained_policy(checkpoint, EVALUATION)
    assert target == trained_policy_path() == installed_trained_policy()
    assert (target / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((target / EVALUATION_FILE).read_text()) == EVALUATION
    assert evaluation_line(target) == (
        "success in 43 of 50 evaluation episodes (seed 100, 10 s timeout, "
        "median time to success 2.41 s)"
    )
    assert [path.name for path in target.parent.iterdir()] == [target.name], (
        "no staging directory left"
    )


def test_an_installed_policy_is_never_replaced_and_a_partial_one_is_not_installed(checkpoint):
    partial = trained_policy_path()
    partial.mkdir(parents=True)
    # an install interrupted before its evaluation was written
    (partial / CONTRACT_FILE).write_text("{}")
    assert installed_trained_policy() is None
    install_trained_policy(checkpoint, EVALUATION)
    with pytest.raises(FileExistsError, match="already installed"):
        install_trained_policy(checkpoint, {**EVALUATION, "successes": 50})
    assert json.loads((partial / EVALUATION_FILE).read_text())["successes"] == 43


def test_a_directory_without_the_contract_is_refused(tmp_path, checkpoint):
    (checkpoint / CONTRACT_FILE).unlink()
    with pytest.raises(FileNotFoundError, match=f"no {CONTRACT_FILE}"):
        install_trained_policy(checkpoint, EVALUATION)
    assert installed_trained_policy() is None
