"""Train a small ACT or the tiny SmolVLA on a recorded dataset with LeRobot's own training loop,
offline, on a CPU.

    python -m lerobot_ros.recording.train --dataset DIR --output CHECKPOINT
        [--policy act|smolvla] [--steps N] [--seed S]

Invariant: the training is LeRobot's (``lerobot.scripts.lerobot_train.train``
with its dataset loading, normalisation statistics, optimizer preset and
progress bar); this module only chooses a policy small enough for a CPU and
turns LeRobot's last checkpoint into a servable one: the pretrained model,
its processors and the ``lerobot_ros.json`` sidecar naming the actions,
written to ``--output`` only when the whole run succeeded. The same dataset,
seed and options give the same weights (LeRobot seeds torch, numpy and the
sampler; no data-loader workers).

SmolVLA is the flow-matching policy that does real-time chunking; its VLM is
the tiny generated one of the random default (``build_tiny_vlm``, carried in
the checkpoint's ``vlm`` folder), trained whole from random weights: there is
no pretrained VLM to freeze.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE, VLM_DIR
from lerobot_ros.recording.dataset import video_backend

#: The policy trained here: ACT without its VAE, small transformer, chunks of a second at 30 fps.
#: The learning rates are ten times LeRobot's ACT preset: that preset fine-tunes an ImageNet
#: backbone, and here the backbone starts from random weights and has a few thousand steps to learn
#: the scene.
ACT_OPTIONS = {
    "chunk_size": 30,
    "n_action_steps": 30,
    "dim_model": 256,
    "dim_feedforward": 1024,
    "n_encoder_layers": 2,
    "n_decoder_layers": 1,
    "use_vae": False,
    "optimizer_lr": 1e-4,
    "optimizer_lr_backbone": 1e-4,
}


#: The tiny SmolVLA (``TINY_SMOLVLA_OPTIONS``), chunks of 50 like the random default. Vision and
#: language model train too: frozen, their random weights would be all the policy ever sees of the
#: cube. LeRobot's schedule (warm-up, cosine decay) shrinks to the run's steps by itself.
SMOLVLA_OPTIONS = {
    "chunk_size": 50,
    "n_action_steps": 50,
    "freeze_vision_encoder": False,
    "train_expert_only": False,
    "optimizer_lr": 5e-4,
}
POLICY_TYPES = ("act", "smolvla")


def act_config(device: str = "cpu", **overrides):
    from lerobot.policies.act.configuration_act import ACTConfig

    # No download: the ResNet-18 backbone starts from random weights too.
    return ACTConfig(
        device=device,
        pretrained_backbone_weights=None,
        push_to_hub=False,
        **{**ACT_OPTIONS, **overrides},
    )


def smolvla_config(vlm: Path, device: str = "cpu", **overrides):
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig

    return SmolVLAConfig(
        device=device,
        vlm_model_name=str(vlm),
        push_to_hub=False,
        **{**policy_options("smolvla"), **overrides},
    )


def policy_options(policy: str) -> dict:
    """The policy's recipe: what its config is built from and what the contract's ``training``
    records."""
    if policy == "act":
        return dict(ACT_OPTIONS)
    from lerobot_ros.sim.default_policy import TINY_SMOLVLA_OPTIONS

    return {**TINY_SMOLVLA_OPTIONS, **SMOLVLA_OPTIONS}


def dataset_names(root: Path) -> tuple[list[str], int]:
    """The dataset's action names and fps, from its metadata."""
    info = json.loads((Path(root) / "meta" / "info.json").read_text())
    return list(info["features"]["action"]["names"]), int(info["fps"])


def train(
    dataset: Path,
    output: Path,
    steps: int,
    batch_size: int,
    seed: int,
    device: str = "cpu",
    work_dir: Path | None = None,
    note: str = "",
    policy: str = "act",
) -> Path:
    """Train ``policy`` (one of ``POLICY_TYPES``), then write the servable checkpoint to ``output``
    (which must not exist)."""
    from lerobot.configs.default import DatasetConfig, WandBConfig
    from lerobot.configs.train import TrainPipelineConfig
    from lerobot.scripts.lerobot_train import train as lerobot_train

    dataset, output = Path(dataset).resolve(), Path(output).resolve()
    if output.exists():
        raise FileExistsError(
            f"{output} exists; choose a new checkpoint directory (nothing is overwritten)"
        )
    if policy not in POLICY_TYPES:
        raise ValueError(f"cannot train policy {policy!r}; choose one of {list(POLICY_TYPES)}")
    action_names, fps = dataset_names(dataset)
    run_dir = Path(tempfile.mkdtemp(prefix="lerobot_ros_train_", dir=work_dir)) / "run"
    # SmolVLA only: the generated VLM it reads, copied into the checkpoint
    vlm = run_dir.parent / VLM_DIR
    if policy == "smolvla":
        from lerobot_ros.sim.default_policy import build_tiny_vlm

        build_tiny_vlm(vlm)
    config = TrainPipelineConfig(
        dataset=DatasetConfig(
            repo_id=f"local/{dataset.name}", root=str(dataset), video_backend=video_backend()
        ),
        policy=act_config(device) if policy == "act" else smolvla_config(vlm, device),
        output_dir=run_dir,
        seed=seed,
        steps=steps,
        batch_size=batch_size,
        num_workers=0,  # reproducible, and a CPU has no cores to spare for loader processes
        log_freq=max(1, steps // 10),
        save_freq=steps,
        wandb=WandBConfig(enable=False),
    )
    started = time.monotonic()
    lerobot_train(config)
    trained = run_dir / "checkpoints" / "last" / "pretrained_model"
    if policy == "smolvla":  # the server re-points the recorded VLM path at this copy
        shutil.copytree(vlm, trained / VLM_DIR)
    (trained / CONTRACT_FILE).write_text(
        json.dumps(
            {
                "action_names": action_names,
                "state_names": action_names,
                "fps": fps,
                "note": note
                or f"{policy} trained by lerobot_ros.recording.train on {dataset.name}: {steps} "
                "steps, "
                f"batch {batch_size}, seed {seed}",
                "training": {
                    "policy": policy,
                    "dataset": dataset.name,
                    "steps": steps,
                    "batch_size": batch_size,
                    "seed": seed,
                    "seconds": round(time.monotonic() - started, 1),
                    **policy_options(policy),
                },
            },
            indent=2,
        )
    )
    output.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(trained, output)
    shutil.rmtree(run_dir.parent, ignore_errors=True)
    return output


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--dataset", required=True, help="LeRobot dataset directory (from episode_recorder_node)"
    )
    parser.add_argument(
        "--output", required=True, help="where the servable checkpoint goes (must not exist)"
    )
    parser.add_argument(
        "--policy",
        choices=POLICY_TYPES,
        default="act",
        help="act: small ACT (ResNet-18); smolvla: the tiny SmolVLA, "
        "which does real-time chunking",
    )
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    checkpoint = train(
        Path(args.dataset),
        Path(args.output),
        args.steps,
        args.batch_size,
        args.seed,
        args.device,
        policy=args.policy,
    )
    print(
        json.dumps(
            {
                "checkpoint": str(checkpoint),
                "policy": args.policy,
                "steps": args.steps,
                "seed": args.seed,
            }
        ),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
