"""Checkpoints the tests build offline besides the default ACT: Diffusion, and an unservable
family."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA, SO101_JOINT_NAMES


def _stats(dim: int) -> dict:
    vector = {
        "mean": np.zeros(dim),
        "std": np.ones(dim),
        "min": np.full(dim, -3.0),
        "max": np.full(dim, 3.0),
    }
    image = {
        key: np.full((3, 1, 1), value)
        for key, value in (("mean", 0.45), ("std", 0.25), ("min", 0.0), ("max", 1.0))
    }
    return {"observation.state": vector, "action": dict(vector), FRONT_CAMERA: image}


def build_diffusion_checkpoint(directory: Path, inference_steps: int = 10) -> Path:
    """A small random-weight Diffusion policy (2 observation steps: it keeps history)."""
    import torch
    from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
    from lerobot.policies.diffusion.configuration_diffusion import DiffusionConfig
    from lerobot.policies.diffusion.modeling_diffusion import DiffusionPolicy
    from lerobot.policies.factory import make_pre_post_processors

    dim = len(SO101_JOINT_NAMES)
    config = DiffusionConfig(
        input_features={
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(dim,)),
            FRONT_CAMERA: PolicyFeature(type=FeatureType.VISUAL, shape=(3, *DEFAULT_IMAGE_SHAPE)),
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(dim,))},
        n_obs_steps=2,
        horizon=16,
        n_action_steps=8,
        crop_shape=None,
        pretrained_backbone_weights=None,
        use_group_norm=True,
        down_dims=(32, 64),
        diffusion_step_embed_dim=32,
        num_inference_steps=inference_steps,
        normalization_mapping={
            "VISUAL": NormalizationMode.MEAN_STD,
            "STATE": NormalizationMode.MIN_MAX,
            "ACTION": NormalizationMode.MIN_MAX,
        },
        device="cpu",
    )
    torch.manual_seed(0)
    policy = DiffusionPolicy(config)
    preprocessor, postprocessor = make_pre_post_processors(config, dataset_stats=_stats(dim))
    directory.mkdir(parents=True, exist_ok=True)
    policy.save_pretrained(directory)
    preprocessor.save_pretrained(directory)
    postprocessor.save_pretrained(directory)
    (directory / "lerobot_ros.json").write_text(
        json.dumps({"action_names": list(SO101_JOINT_NAMES), "fps": 30.0})
    )
    return directory


def write_unservable_checkpoint(directory: Path) -> Path:
    """config.json of a VQ-BeT policy: a family this server has no chunk driver for."""
    from lerobot.policies.vqbet.configuration_vqbet import VQBeTConfig

    directory.mkdir(parents=True, exist_ok=True)
    VQBeTConfig()._save_pretrained(directory)
    return directory
