"""Installing the trained reach ACT: scored through the whole loop, then moved into the cache
whole.

    python -m lerobot_ros.recording.trained_policy --checkpoint CHECKPOINT [--episodes 50]

evaluates CHECKPOINT through the whole loop and installs it with that score
(``regenerate --install`` does the same after training).

Invariant: a trained policy is in the cache only whole and evaluated: the
checkpoint, its ``lerobot_ros.json`` and the ``evaluation.json`` of the
evaluation run that accepted it are moved into place together by one rename
(``install_trained_policy``), so a demo never serves a half-copied
checkpoint or quotes a score it does not have. Where the trained policies
live and when one counts as present is ``lerobot_ros.policy_names``' rule:
the cached ACT (too big to commit, so ``regenerate --install`` builds it
from scratch) and the tiny trained SmolVLA committed in
``lerobot_ros/sim/policies`` with the ``evaluation.json`` of its evaluation,
so a fresh install has a trained policy at once.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from lerobot_ros.policy_names import (
    EVALUATION_FILE,
    TRAINED_POLICY_NAME,
    installed_trained_policy,
    trained_policy_path,
)
from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.recording.evaluate import evaluate

#: The accepted policy's score: episodes of the reach task, on cubes its training never showed.
EVALUATION_EPISODES = 50
EVALUATION_SEED = 100
EVALUATION_TIMEOUT_S = 10.0


def install_trained_policy(checkpoint: Path, evaluation: dict) -> Path:
    """Copy ``checkpoint`` with its ``evaluation`` into the cache as the trained policy (replacing
    none)."""
    target = trained_policy_path()
    if installed_trained_policy() is not None:
        raise FileExistsError(f"{target} is already installed; delete it to install another")
    if not (Path(checkpoint) / CONTRACT_FILE).is_file():
        raise FileNotFoundError(f"{checkpoint} is no servable checkpoint (no {CONTRACT_FILE})")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{TRAINED_POLICY_NAME}-", dir=target.parent))
    try:
        shutil.copytree(checkpoint, staging, dirs_exist_ok=True)
        (staging / EVALUATION_FILE).write_text(json.dumps(evaluation, indent=2))
        # a partial one (no evaluation) from an interrupted install
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def evaluation_line(checkpoint: Path) -> str:
    """One sentence on how the installed policy scored when it was accepted."""
    summary = json.loads((Path(checkpoint) / EVALUATION_FILE).read_text())
    median = summary.get("time_to_success_s_median")
    timing = f", median time to success {median:.2f} s" if median is not None else ""
    return (
        f"success in {summary['successes']} of {summary['episodes']} evaluation episodes "
        f"(seed {summary['seed']}, {summary['task_timeout_s']:g} s timeout{timing})"
    )


def evaluate_and_install(
    checkpoint: Path, output_dir: Path, episodes: int = EVALUATION_EPISODES
) -> tuple[Path, dict]:
    """Score ``checkpoint`` through the whole loop, then install it with that score."""
    evaluation = evaluate(
        str(checkpoint), episodes, EVALUATION_TIMEOUT_S, EVALUATION_SEED, output_dir=output_dir
    )
    if evaluation["error"]:
        raise RuntimeError(
            f"evaluation of {checkpoint} failed, nothing installed: {evaluation['error']}"
        )
    return install_trained_policy(checkpoint, evaluation), evaluation


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint", required=True, help="a checkpoint lerobot_ros.recording.train wrote"
    )
    parser.add_argument("--episodes", type=int, default=EVALUATION_EPISODES)
    parser.add_argument("--output-dir", default="", help="evaluation logs (default: a temp dir)")
    args = parser.parse_args(argv)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    installed, evaluation = evaluate_and_install(
        Path(args.checkpoint),
        Path(args.output_dir or tempfile.mkdtemp(prefix="lerobot_ros_install_")),
        args.episodes,
    )
    print(
        json.dumps({"installed": str(installed), "line": evaluation_line(installed)}), flush=True
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
