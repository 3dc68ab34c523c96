"""A trained SmolVLA on the reach task, real-time chunking on and off, at several injected delays,
in one run.

Each configuration is scored by ``python -m lerobot_ros.recording.evaluate``
(server, sim and executor as processes, the demo's wiring) on the same
seeded cubes, one after the other, so all of them see the same episodes on
the same machine. RTC on: the executor asks for real-time chunking (replace
mode, its measured delay and the unexecuted prefix go with each request);
off: append mode. The server's ``inject_delay_s`` stands in for a slower
model: real VLAs take 100-300 ms per chunk, the tiny one tens of ms.

The smoothness figures are the executor's (ExecutorStatus, since its
start-up): the boundary jump between the last action executed from one
chunk and the first from the next, against the ordinary step inside a
chunk, and the prefix deviation (how far each new chunk's first actions are
from what was executed meanwhile). All in radians, the largest change over
the joints.

Success is compared episode by episode: every configuration sees the same
cubes (episode k's cube is seeded by the seed and k), so RTC on against off
at one delay, and one mode at 300 ms against itself at 0 ms, are paired
comparisons (bench.reach_runs.paired_difference); each rate carries its 95 %
Wilson interval. The RTC paper (arXiv 2506.07339) reports real-time chunking
holding its success rate from 0 to 300 ms of delay while naive execution
degrades; the table says whether ours does.

usage: python -m bench.rtc_reach_evaluation [--checkpoint DIR] [--episodes 100]
       [--inject-delay-s 0 0.1 0.2 0.3] [--smoke]
(default checkpoint: the trained SmolVLA committed in lerobot_ros/sim/policies)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.reach_runs import (
    cell,
    episode_successes,
    paired_difference,
    run_evaluation,
    success_times,
    wilson_interval,
)
from lerobot_ros.policy_names import EVALUATION_FILE, committed_trained_smolvla
from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.recording.trained_policy import EVALUATION_SEED, EVALUATION_TIMEOUT_S

#: The goal's ratio: with RTC the boundary jump is at most this fraction of the jump without it.
JUMP_RATIO_GOAL = 1 / 3
#: Episodes per configuration: enough for a 95 % interval of about +-9 points on a rate near 0.7.
EPISODES = 100
DELAYS_S = [0.0, 0.1, 0.2, 0.3]


def configurations(delays: list[float]) -> list[tuple[float, bool]]:
    return [(delay, rtc) for delay in delays for rtc in (True, False)]


def label(delay: float, rtc: bool) -> str:
    return f"{delay * 1000:.0f} ms, RTC {'on' if rtc else 'off'}"


def jump_ratios(results: dict[tuple[float, bool], dict]) -> dict[float, float | None]:
    """Per delay: boundary jump mean with RTC over the one without (None where either is missing or
    zero)."""
    ratios = {}
    for delay in sorted({delay for delay, _ in results}):
        on, off = results.get((delay, True), {}), results.get((delay, False), {})
        jump_on, jump_off = on.get("boundary_jump_mean"), off.get("boundary_jump_mean")
        ratios[delay] = jump_on / jump_off if jump_on is not None and jump_off else None
    return ratios


def committed_evaluation_line(checkpoint: Path) -> str:
    """The checkpoint's own evaluation.json (the demo's configuration), which the demo page quotes,
    if it has one."""
    path = checkpoint / EVALUATION_FILE
    if not path.is_file():
        return "The checkpoint carries no evaluation.json of its own."
    evaluation = json.loads(path.read_text())
    low, high = wilson_interval(evaluation["successes"], evaluation["episodes"])
    return (
        f"The checkpoint's own evaluation.json (the demo's configuration: RTC "
        f"{'on' if evaluation.get('rtc_requested') else 'off'}, "
        f"{1000 * evaluation.get('inject_delay_s', 0.0):.0f} ms, "
        f"seed {evaluation.get('seed')}), which docs/tutorials/demo.md quotes, is an earlier run: "
        "success in "
        f"{evaluation['successes']} of {evaluation['episodes']} (95 % {low:.2f}-{high:.2f})."
    )


def rate_with_interval(summary: dict) -> str:
    low, high = wilson_interval(summary["successes"], summary["episodes"])
    return f"{cell(summary['success_rate'], 2)}, 95 % {low:.2f}-{high:.2f}"


def signed(value: float) -> str:
    return f"{value:+.2f}"


def paired_table(results: dict[tuple[float, bool], dict]) -> str:
    """RTC on minus off at each delay, and each mode at each delay minus itself at the smallest,
    episode by episode."""
    rows = [
        "| comparison | episodes | success difference | 95 % interval | only the first succeeded "
        "| only the second "
        "| McNemar p |",
        "|---|---|---|---|---|---|---|",
    ]

    def row(name: str, first: dict, second: dict) -> None:
        d = paired_difference(episode_successes(first), episode_successes(second))
        rows.append(
            f"| {name} | {d['episodes']} | **{signed(d['difference'])}** | {signed(d['low'])} to "
            f"{signed(d['high'])} | {d['only_first']} | {d['only_second']} | {d['p_value']:.3f} |"
        )

    delays = sorted({delay for delay, _ in results})
    for delay in delays:
        if (delay, True) in results and (delay, False) in results:
            row(
                f"{delay * 1000:.0f} ms: RTC on - off",
                results[(delay, True)],
                results[(delay, False)],
            )
    for rtc in (True, False):
        for delay in delays[1:]:
            if (delay, rtc) in results and (delays[0], rtc) in results:
                row(
                    f"RTC {'on' if rtc else 'off'}: {delay * 1000:.0f} ms - "
                    f"{delays[0] * 1000:.0f} ms",
                    results[(delay, rtc)],
                    results[(delays[0], rtc)],
                )
    return "\n".join(rows)


def table(results: dict[tuple[float, bool], dict]) -> str:
    rows = [
        "| injected delay | RTC | merge mode | episodes | successes | time to success, median "
        "(mean) | "
        "boundary jump mean (max) | action step mean | prefix deviation mean (max) | round trip "
        "p50 / p95 [ms] "
        "| starved ticks |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (delay, rtc), summary in results.items():
        rows.append(
            f"| {delay * 1000:.0f} ms | {'on' if rtc else 'off'} | "
            f"{'replace (RTC)' if summary.get('rtc_active') else 'append'} | "
            f"{summary['episodes']} | "
            f"{summary['successes']} ({rate_with_interval(summary)}) | {success_times(summary)} | "
            f"**{cell(summary.get('boundary_jump_mean'))}** "
            f"({cell(summary.get('boundary_jump_max'))}) | "
            f"{cell(summary.get('action_step_mean'))} | "
            f"{cell(summary.get('prefix_deviation_mean'), 4)} "
            f"({cell(summary.get('prefix_deviation_max'), 4)}) | "
            f"{cell(summary.get('latency_ms_p50'), 1)} / {cell(summary.get('latency_ms_p95'), 1)} "
            "| "
            f"{summary.get('starvation_ticks', 'n/a')} |"
        )
    return "\n".join(rows)


def save_rtc_reach_plot(results: dict[tuple[float, bool], dict], path: Path) -> None:
    """Success rate and mean boundary jump per configuration, RTC on in blue, off in grey."""
    import matplotlib.pyplot as plt  # the Agg backend: set by common

    labels = [label(delay, rtc) for delay, rtc in results]
    colors = ["#1f77b4" if rtc else "#7f7f7f" for _, rtc in results]
    figure, (success, jump) = plt.subplots(1, 2, figsize=(9, 3.4))
    rates = [summary["success_rate"] or 0.0 for summary in results.values()]
    intervals = [
        wilson_interval(summary["successes"], summary["episodes"]) for summary in results.values()
    ]
    errors = [
        [rate - low for rate, (low, _) in zip(rates, intervals, strict=False)],
        [high - rate for rate, (_, high) in zip(rates, intervals, strict=False)],
    ]
    success.bar(labels, rates, color=colors, yerr=errors, capsize=3)
    success.set_ylim(0, 1)
    success.set_ylabel("success rate (95 % interval)")
    jump.bar(
        labels,
        [summary.get("boundary_jump_mean") or 0.0 for summary in results.values()],
        color=colors,
    )
    jump.set_ylabel("boundary jump, mean [rad]")
    for axis in (success, jump):
        axis.tick_params(axis="x", labelrotation=30, labelsize=8)
    figure.suptitle("Trained SmolVLA on the reach task: RTC on (blue) and off (grey)", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--checkpoint",
        type=Path,
        default=committed_trained_smolvla(),
        help="a trained SmolVLA (python -m lerobot_ros.recording.regenerate --policy smolvla); "
        "default: the one committed with the package",
    )
    parser.add_argument(
        "--episodes", type=int, default=EPISODES, help="episodes per configuration"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=EVALUATION_SEED,
        help="the sim's seed (held out: training used seed 0)",
    )
    parser.add_argument("--inject-delay-s", type=float, nargs="+", default=DELAYS_S)
    common.add_output_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.episodes, args.inject_delay_s = 1, [0.0]
    document, plot_dir = common.outputs(args)
    if args.checkpoint is None:
        print(
            "no trained SmolVLA: this install left out lerobot_ros/sim/policies; pass "
            "--checkpoint",
            file=sys.stderr,
        )
        return 2
    contract = json.loads((args.checkpoint / CONTRACT_FILE).read_text())
    training = contract.get("training", {})
    if training.get("policy") != "smolvla":
        print(
            f"{args.checkpoint} is no SmolVLA trained by lerobot_ros.recording.train "
            f"(its training record says policy {training.get('policy')!r}); RTC needs a "
            "flow-matching policy",
            file=sys.stderr,
        )
        return 2
    log_root = Path(tempfile.mkdtemp(prefix="bench_rtc_reach_"))
    results = {}
    for index, (delay, rtc) in enumerate(configurations(args.inject_delay_s)):
        options = ("--rtc", "on" if rtc else "off", "--inject-delay-s", str(delay))
        results[(delay, rtc)] = run_evaluation(
            args.checkpoint, args.episodes, args.seed, log_root / f"run{index}", options
        )
        print(f"{label(delay, rtc)}: {json.dumps(results[(delay, rtc)])}", flush=True)
    plot = plot_dir / "bench_rtc_reach_evaluation.png"
    save_rtc_reach_plot(results, plot)
    ratios = "; ".join(
        f"at {delay * 1000:.0f} ms {'n/a' if ratio is None else f'{ratio:.2f}'}"
        for delay, ratio in jump_ratios(results).items()
    )
    body = "\n".join(
        [
            f"Reach task ({EVALUATION_TIMEOUT_S:g} s per episode), seed {args.seed}: the same "
            "held-out cubes for every row. "
            "Whole loop: policy_server_node, sim_robot_node and chunk_executor_node as processes, "
            "CPU, one configuration "
            "after the other. RTC on: replace mode with the measured delay and the unexecuted "
            "prefix; off: append mode. "
            "The server runs its default worker, the pipeline. "
            "Smoothness in radians (largest change over the joints), the executor's figures since "
            "its start-up.",
            "",
            table(results),
            "",
            "Paired success differences (same cubes episode by episode; a difference whose "
            "interval holds 0 is not shown "
            "by this run):",
            "",
            paired_table(results),
            "",
            f"Boundary jump with RTC over without: {ratios} (goal: at most {JUMP_RATIO_GOAL:.2f} "
            "at 100 ms).",
            "",
            committed_evaluation_line(args.checkpoint),
            "",
            f"Policy: `{args.checkpoint.name}`, {training.get('steps', '?')} steps of batch "
            f"{training.get('batch_size', '?')} "
            f"on `{training.get('dataset', '?')}` in {training.get('seconds', '?')} s "
            "(`python -m lerobot_ros.recording.regenerate --work-dir DIR --policy smolvla`).",
            "",
            f"![RTC on and off on the reach task]({common.image_link(document, plot)})",
        ]
    )
    options = (
        " --smoke"
        if args.smoke
        else "".join(
            [
                f" --episodes {args.episodes}" if args.episodes != EPISODES else "",
                f" --inject-delay-s {' '.join(f'{d:g}' for d in args.inject_delay_s)}"
                if args.inject_delay_s != DELAYS_S
                else "",
            ]
        )
    )
    common.write_section(
        "rtc_reach_evaluation",
        f"python -m bench.rtc_reach_evaluation --checkpoint {args.checkpoint}{options}",
        body,
        document,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
