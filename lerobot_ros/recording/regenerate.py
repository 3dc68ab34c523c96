"""Regenerate a trained policy from scratch: record expert demonstrations, then train on them.

    python -m lerobot_ros.recording.regenerate --work-dir DIR [--episodes 20] [--steps 3000] [--seed 0]

1. Record: sim_robot_node with its scripted expert (``expert:=true``) and
   episode_recorder_node (``max_episodes``) run as separate processes; the
   recorder writes ``DIR/dataset`` (a LeRobot v3 dataset) and exits when it
   has written that many whole episodes.
2. Train: ``lerobot_ros.recording.train`` (LeRobot's training loop, with its
   progress bar) writes the servable checkpoint ``DIR/checkpoint``.

The seed fixes the cubes, the expert's noise and the training (weights,
sampling); frames are sampled on the live camera topic, so two recordings
can differ by a frame where the operating system scheduled a process late.
Nothing existing is overwritten: DIR/dataset and DIR/checkpoint must not exist.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from lerobot_ros.processes import spawn_node, stop

NAMESPACE = "/expert_arm"


def record(dataset: Path, episodes: int, seed: int, image_shape: tuple[int, int], log_dir: Path,
           timeout_s: float) -> dict:
    """Expert episodes into ``dataset``; the recorder's closing summary."""
    if dataset.exists():
        raise FileExistsError(f"{dataset} exists; regenerate writes a new dataset")
    log_dir.mkdir(parents=True, exist_ok=True)
    with (log_dir / "recorder.log").open("w") as recorder_log, (log_dir / "sim_robot.log").open("w") as sim_log:
        # The recorder first: it loads LeRobot for a while, and episodes it did not see start are skipped.
        recorder = spawn_node("lerobot_ros.recording.node", {
            "dataset_root": str(dataset), "max_episodes": episodes,
            "image_height": image_shape[0], "image_width": image_shape[1],
        }, log=recorder_log, node_name="episode_recorder", namespace=NAMESPACE)
        sim = spawn_node("lerobot_ros.sim.robot_node", {"expert": True, "seed": seed},
                         log=sim_log, node_name="sim_robot", namespace=NAMESPACE)
        deadline = time.monotonic() + timeout_s
        try:
            while recorder.poll() is None and sim.poll() is None and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            recorder_code = stop(recorder)
            stop(sim)
    lines = [line for line in (log_dir / "recorder.log").read_text().splitlines() if line.startswith("{")]
    if recorder_code != 0 or not lines:
        raise RuntimeError(f"recording failed (recorder exit {recorder_code}); see {log_dir}")
    return json.loads(lines[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--image-height", type=int, default=96, help="stored (and trained) image height")
    parser.add_argument("--image-width", type=int, default=128, help="stored (and trained) image width")
    parser.add_argument("--record-timeout", type=float, default=900.0, help="seconds the recording may take")
    args = parser.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from lerobot_ros.recording.train import train

    work = Path(args.work_dir).resolve()
    started = time.monotonic()
    recorded = record(work / "dataset", args.episodes, args.seed, (args.image_height, args.image_width),
                      work / "logs", args.record_timeout)
    record_s = time.monotonic() - started
    print(f"regenerate: recorded {recorded['episodes_written']} expert episodes ({recorded['frames_written']} frames) "
          f"in {record_s:.0f} s; training {args.steps} steps", flush=True)
    checkpoint = train(work / "dataset", work / "checkpoint", args.steps, args.batch_size, args.seed)
    summary = {"dataset": str(work / "dataset"), "checkpoint": str(checkpoint), **recorded,
               "record_s": round(record_s, 1), "train_s": round(time.monotonic() - started - record_s, 1),
               "steps": args.steps, "seed": args.seed}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
