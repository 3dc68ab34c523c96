"""Regenerate a trained policy from scratch: record expert demonstrations, then train on them.

    python -m lerobot_ros.recording.regenerate --work-dir DIR [--episodes 100] [--steps 6000] \\
        [--seed 0] [--install]
    # the committed SmolVLA's recipe:
    python -m lerobot_ros.recording.regenerate --work-dir DIR --policy smolvla --steps 8000

1. Record: sim_robot_node with its scripted expert (``expert:=true``) and
   episode_recorder_node (``max_episodes``) run as separate processes; the
   recorder writes ``DIR/dataset`` (a LeRobot v3 dataset) and exits when it
   has written that many whole episodes.
2. Train: ``lerobot_ros.recording.train`` (LeRobot's training loop, with its
   progress bar) writes the servable checkpoint ``DIR/checkpoint``.
3. With ``--install``: evaluate it through the whole loop
   (``lerobot_ros.recording.evaluate``, logs in ``DIR/evaluation``) and
   install it with that score as the demo's trained policy
   (``trained_policy``; ACT only). The defaults are the installed policy's recipe.

The seed fixes the cubes, the expert's noise and the training (weights,
sampling); frames are sampled on the live camera topic, so two recordings
can differ by a frame where the operating system scheduled a process late.

Invariant: nothing existing is overwritten: DIR/dataset and DIR/checkpoint
must not exist, and only an ACT that passed its evaluation is installed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.recording.train import POLICY_TYPES, train
from lerobot_ros.recording.trained_policy import EVALUATION_EPISODES, evaluate_and_install

NAMESPACE = "/expert_arm"


def record(
    dataset: Path,
    episodes: int,
    seed: int,
    image_shape: tuple[int, int],
    log_dir: Path,
    timeout_s: float,
) -> dict:
    """Expert episodes into ``dataset``; the recorder's closing summary."""
    if dataset.exists():
        raise FileExistsError(f"{dataset} exists; regenerate writes a new dataset")
    log_dir.mkdir(parents=True, exist_ok=True)
    with (
        (log_dir / "recorder.log").open("w") as recorder_log,
        (log_dir / "sim_robot.log").open("w") as sim_log,
    ):
        # The recorder first: it loads LeRobot for a while, and episodes it did not see start are
        # skipped.
        recorder = spawn_node(
            "lerobot_ros.recording.node",
            {
                "dataset_root": str(dataset),
                "max_episodes": episodes,
                "image_height": image_shape[0],
                "image_width": image_shape[1],
            },
            log=recorder_log,
            node_name="episode_recorder",
            namespace=NAMESPACE,
        )
        sim = spawn_node(
            "lerobot_ros.sim.robot_node",
            {"expert": True, "seed": seed},
            log=sim_log,
            node_name="sim_robot",
            namespace=NAMESPACE,
        )
        deadline = time.monotonic() + timeout_s
        try:
            while recorder.poll() is None and sim.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            recorder_code = stop(recorder)
            stop(sim)
    lines = [
        line
        for line in (log_dir / "recorder.log").read_text().splitlines()
        if line.startswith("{")
    ]
    if recorder_code != 0 or not lines:
        raise RuntimeError(f"recording failed (recorder exit {recorder_code}); see {log_dir}")
    return json.loads(lines[-1])


def regenerate(
    work: Path,
    episodes: int = 100,
    steps: int = 6000,
    batch_size: int = 8,
    seed: int = 0,
    image_shape: tuple[int, int] = (48, 64),
    record_timeout_s: float = 1800.0,
    policy: str = "act",
) -> dict:
    """Record expert episodes into ``work/dataset`` and train ``work/checkpoint`` on them; the
    summary."""
    work = Path(work).resolve()
    started = time.monotonic()
    recorded = record(
        work / "dataset", episodes, seed, image_shape, work / "logs", record_timeout_s
    )
    record_s = time.monotonic() - started
    print(
        f"regenerate: recorded {recorded['episodes_written']} expert episodes "
        f"({recorded['frames_written']} frames) "
        f"in {record_s:.0f} s; training {policy} for {steps} steps",
        flush=True,
    )
    checkpoint = train(
        work / "dataset", work / "checkpoint", steps, batch_size, seed, policy=policy
    )
    return {
        "dataset": str(work / "dataset"),
        "checkpoint": str(checkpoint),
        **recorded,
        "record_s": round(record_s, 1),
        "train_s": round(time.monotonic() - started - record_s, 1),
        "policy": policy,
        "steps": steps,
        "seed": seed,
    }


def regenerate_and_install(
    work: Path, evaluate_episodes: int = EVALUATION_EPISODES, **recipe
) -> dict:
    """``regenerate``, then score the checkpoint and install it as the demo's trained policy."""
    if recipe.get("policy", "act") != "act":
        raise ValueError(
            f"the demo's trained policy is an ACT; train {recipe['policy']} without --install "
            "and serve or evaluate its checkpoint by path"
        )
    summary = regenerate(work, **recipe)
    checkpoint = Path(summary["checkpoint"])
    installed, evaluation = evaluate_and_install(
        checkpoint, checkpoint.parent / "evaluation", evaluate_episodes
    )
    return {**summary, "installed": str(installed), "success_rate": evaluation["success_rate"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument(
        "--policy", choices=POLICY_TYPES, default="act", help="what to train (train --policy)"
    )
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--image-height", type=int, default=48, help="stored (and trained) image height"
    )
    parser.add_argument(
        "--image-width", type=int, default=64, help="stored (and trained) image width"
    )
    parser.add_argument(
        "--record-timeout", type=float, default=1800.0, help="seconds the recording may take"
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="then evaluate the checkpoint through the whole loop and install it with its score "
        "as the demo's trained policy (lerobot_ros.recording.trained_policy)",
    )
    parser.add_argument(
        "--evaluate-episodes",
        type=int,
        default=EVALUATION_EPISODES,
        help="episodes the --install evaluation runs",
    )
    args = parser.parse_args(argv)
    if args.install and args.policy != "act":
        parser.error(
            f"--install installs the demo's trained ACT; a trained {args.policy} is served and "
            "evaluated "
            "by its checkpoint path (DIR/checkpoint)"
        )
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    recipe = dict(
        episodes=args.episodes,
        steps=args.steps,
        batch_size=args.batch_size,
        seed=args.seed,
        image_shape=(args.image_height, args.image_width),
        record_timeout_s=args.record_timeout,
        policy=args.policy,
    )
    work = Path(args.work_dir)
    if args.install:
        summary = regenerate_and_install(work, args.evaluate_episodes, **recipe)
    else:
        summary = regenerate(work, **recipe)
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
