"""What the reach-task benchmarks share: one evaluation run as a process of its own, and their
table cells.

``bench.reach_evaluation`` (trained against random ACT) and
``bench.rtc_reach_evaluation`` (a trained SmolVLA, RTC on and off) each score
several configurations with ``python -m lerobot_ros.recording.evaluate``,
one after the other on the same seeded cubes.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from lerobot_ros.recording.trained_policy import EVALUATION_TIMEOUT_S


def run_evaluation(
    checkpoint: Path, episodes: int, seed: int, log_dir: Path, options: tuple[str, ...] = ()
) -> dict:
    """One ``lerobot_ros.recording.evaluate`` run (its own processes); ``options`` go to it as they
    are."""
    log_dir.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "lerobot_ros.recording.evaluate",
        "--checkpoint",
        str(checkpoint),
        "--episodes",
        str(episodes),
        "--seed",
        str(seed),
        "--timeout",
        str(EVALUATION_TIMEOUT_S),
        "--output-dir",
        str(log_dir),
        *options,
    ]
    with (log_dir / "evaluate.log").open("w") as log:
        code = subprocess.run(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=600 + episodes * (EVALUATION_TIMEOUT_S + 5),
        ).returncode
    summary = json.loads((log_dir / "evaluation.json").read_text())
    if code != 0 or summary["error"]:
        raise RuntimeError(
            f"evaluation of {checkpoint} failed (exit {code}): {summary['error']}; see {log_dir}"
        )
    return summary


def cell(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def success_times(summary: dict) -> str:
    if summary["time_to_success_s_median"] is None:
        return "none succeeded"
    return (
        f"{summary['time_to_success_s_median']:.2f} s ({summary['time_to_success_s_mean']:.2f} s)"
    )


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95 % interval of a success rate (Wilson's score interval: honest near 0 and 1, unlike mean
    +- 2 se)."""
    if trials == 0:
        return (0.0, 1.0)
    rate = successes / trials
    centre = (rate + z * z / (2 * trials)) / (1 + z * z / trials)
    half = (
        z
        * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials))
        / (1 + z * z / trials)
    )
    # At 0 or all successes the bound is exactly 0 or 1; rounding would leave it a hair inside.
    return (
        0.0 if successes == 0 else centre - half,
        1.0 if successes == trials else centre + half,
    )


def paired_difference(first: list[bool], second: list[bool], z: float = 1.96) -> dict:
    """Success of ``first`` minus ``second`` over the same episodes (same seed, same cubes),
    episode by episode.

    Pairing removes the cubes' own difficulty from the comparison: only the
    discordant episodes (one succeeded, the other not) carry information.
    The interval is the paired normal one; the p-value is McNemar's exact
    (two-sided binomial over the discordant episodes), fit for the few
    discordant pairs 100 episodes give.
    """
    pairs = list(zip(first, second, strict=False))
    n = len(pairs)
    only_first = sum(1 for a, b in pairs if a and not b)
    only_second = sum(1 for a, b in pairs if b and not a)
    difference = (only_first - only_second) / n if n else 0.0
    spread = (
        math.sqrt(max(0.0, only_first + only_second - (only_first - only_second) ** 2 / n)) / n
        if n
        else 0.0
    )
    discordant = only_first + only_second
    tail = (
        sum(math.comb(discordant, k) for k in range(min(only_first, only_second) + 1))
        / 2**discordant
    )
    return {
        "episodes": n,
        "difference": difference,
        "low": difference - z * spread,
        "high": difference + z * spread,
        "only_first": only_first,
        "only_second": only_second,
        "p_value": min(1.0, 2 * tail),
    }


def episode_successes(summary: dict) -> list[bool]:
    """Per episode, in episode order: did it succeed."""
    return [
        o["outcome"] == "SUCCESS" for o in sorted(summary["outcomes"], key=lambda o: o["episode"])
    ]
