"""What ``recording.train`` trains and what it refuses (no ROS, no training run)."""

from __future__ import annotations

import pytest

from lerobot_ros.recording import regenerate
from lerobot_ros.recording.train import SMOLVLA_OPTIONS, policy_options, smolvla_config, train
from lerobot_ros.sim.default_policy import TINY_SMOLVLA_OPTIONS


def test_the_smolvla_recipe_is_the_random_defaults_architecture_with_vision_and_language_trained(
    tmp_path,
):
    config = smolvla_config(tmp_path / "vlm")
    assert config.vlm_model_name == str(tmp_path / "vlm") and not config.load_vlm_weights
    assert (config.num_vlm_layers, config.num_steps) == (
        TINY_SMOLVLA_OPTIONS["num_vlm_layers"],
        TINY_SMOLVLA_OPTIONS["num_steps"],
    )
    # A random VLM left frozen would be all the policy ever sees of the cube.
    assert not config.freeze_vision_encoder and not config.train_expert_only
    assert config.chunk_size == config.n_action_steps == SMOLVLA_OPTIONS["chunk_size"]
    assert policy_options("smolvla") == {**TINY_SMOLVLA_OPTIONS, **SMOLVLA_OPTIONS}
    assert policy_options("act")["chunk_size"] == 30


def test_an_unknown_policy_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(
        ValueError, match=r"cannot train policy 'diffusion'; choose one of \['act', 'smolvla'\]"
    ):
        train(
            tmp_path / "dataset",
            tmp_path / "checkpoint",
            steps=1,
            batch_size=1,
            seed=0,
            policy="diffusion",
        )
    assert not (tmp_path / "checkpoint").exists()


def test_regenerate_installs_only_the_demos_act(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        regenerate.main(["--work-dir", str(tmp_path / "work"), "--policy", "smolvla", "--install"])
    assert exit_info.value.code == 2
    assert "--install installs the demo's trained ACT" in capsys.readouterr().err
    assert not (tmp_path / "work").exists()
