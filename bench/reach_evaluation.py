"""Success on the simulated reach task: the trained ACT against the random-weight ACT, in one run.

Each policy is scored by ``python -m lerobot_ros.recording.evaluate`` (server,
sim and executor as processes, the demo's wiring) on the same seeded cubes,
one policy after the other, so both see the same episodes on the same
machine. The trained policy is the installed one (``regenerate --install``)
unless ``--checkpoint`` names another.

usage: python -m bench.reach_evaluation [--episodes 50] [--seed 100] [--checkpoint DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.reach_runs import cell, run_evaluation, success_times
from lerobot_ros.policy_names import installed_trained_policy
from lerobot_ros.recording.evaluate import plot_outcomes
from lerobot_ros.recording.trained_policy import (
    EVALUATION_EPISODES,
    EVALUATION_SEED,
    EVALUATION_TIMEOUT_S,
)
from lerobot_ros.sim.default_policy import default_checkpoint


def save_reach_plot(results: dict[str, dict], path: Path) -> None:
    """One row of episode outcomes per policy, on the same cubes."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(
        len(results), 1, figsize=(9, 2.4 * len(results)), sharex=True, squeeze=False
    )
    for axis, (label, summary) in zip(axes[:, 0], results.items(), strict=False):
        plot_outcomes(axis, summary)
        axis.set_title(
            f"{label}: {summary['successes']}/{summary['episodes']} successes (green)", fontsize=9
        )
    axes[-1, 0].set_xlabel(
        f"evaluation episode (seed {next(iter(results.values()))['seed']}: the same cubes)"
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--episodes", type=int, default=EVALUATION_EPISODES)
    parser.add_argument(
        "--seed",
        type=int,
        default=EVALUATION_SEED,
        help="the sim's seed (held out: training used seed 0)",
    )
    parser.add_argument(
        "--checkpoint", type=Path, default=None, help="trained policy (default: the installed one)"
    )
    common.add_output_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.episodes = 1
    document, plot_dir = common.outputs(args)
    trained = args.checkpoint or installed_trained_policy()
    if trained is None:
        print(
            "no trained policy: install one (python -m lerobot_ros.recording.regenerate "
            "--work-dir DIR --install) "
            "or pass --checkpoint",
            file=sys.stderr,
        )
        return 2
    policies = {"trained ACT": Path(trained), "random-weight ACT": default_checkpoint("act")}
    log_root = Path(tempfile.mkdtemp(prefix="bench_reach_"))
    results = {
        label: run_evaluation(checkpoint, args.episodes, args.seed, log_root / f"policy{index}")
        for index, (label, checkpoint) in enumerate(policies.items())
    }
    plot = plot_dir / "bench_reach_evaluation.png"
    save_reach_plot(results, plot)

    rows = [
        "| policy | episodes | successes | success rate | time to success, median (mean) | "
        "boundary jump mean (max) [rad] | action step mean [rad] | round trip p50 / p95 [ms] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, summary in results.items():
        rows.append(
            f"| {label} | {summary['episodes']} | {summary['successes']} | "
            f"{cell(summary['success_rate'], 2)} | "
            f"{success_times(summary)} | "
            f"{cell(summary.get('boundary_jump_mean'))} "
            f"({cell(summary.get('boundary_jump_max'))}) | "
            f"{cell(summary.get('action_step_mean'))} | "
            f"{cell(summary.get('latency_ms_p50'), 1)} / {cell(summary.get('latency_ms_p95'), 1)} "
            "|"
        )
    trained_contract = json.loads((Path(trained) / "lerobot_ros.json").read_text())
    training = trained_contract.get("training", {})
    body = "\n".join(
        [
            f"Reach task (move the gripper to the cube and close it; {EVALUATION_TIMEOUT_S:g} s "
            f"per episode), seed {args.seed}: "
            "the same cubes for both policies, none of them seen in training (seed 0). Whole "
            "loop: "
            "policy_server_node, sim_robot_node and chunk_executor_node as processes, append "
            "mode, CPU.",
            "",
            *rows,
            "",
            f"Trained policy: `{Path(trained).name}`, {training.get('steps', '?')} steps of batch "
            f"{training.get('batch_size', '?')} on `{training.get('dataset', '?')}` in "
            f"{training.get('seconds', '?')} s "
            "(`python -m lerobot_ros.recording.regenerate --work-dir DIR --install`).",
            "",
            f"![reach evaluation]({common.image_link(document, plot)})",
        ]
    )
    options = (
        " --smoke"
        if args.smoke
        else (f" --episodes {args.episodes}" if args.episodes != EVALUATION_EPISODES else "")
    )
    options += f" --checkpoint {args.checkpoint}" if args.checkpoint else ""
    common.write_section(
        "reach_evaluation", f"python -m bench.reach_evaluation{options}", body, document
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
