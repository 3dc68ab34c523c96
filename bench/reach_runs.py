"""What the reach-task benchmarks share: one evaluation run as a process of its own, and their table cells.

``bench.reach_evaluation`` (trained against random ACT) and
``bench.rtc_reach_evaluation`` (a trained SmolVLA, RTC on and off) each score
several configurations with ``python -m lerobot_ros.recording.evaluate``,
one after the other on the same seeded cubes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from lerobot_ros.recording.trained_policy import EVALUATION_TIMEOUT_S


def run_evaluation(checkpoint: Path, episodes: int, seed: int, log_dir: Path, options: tuple[str, ...] = ()) -> dict:
    """One ``lerobot_ros.recording.evaluate`` run (its own processes); ``options`` go to it as they are."""
    log_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "lerobot_ros.recording.evaluate", "--checkpoint", str(checkpoint),
               "--episodes", str(episodes), "--seed", str(seed), "--timeout", str(EVALUATION_TIMEOUT_S),
               "--output-dir", str(log_dir), *options]
    with (log_dir / "evaluate.log").open("w") as log:
        code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT,
                              timeout=600 + episodes * (EVALUATION_TIMEOUT_S + 5)).returncode
    summary = json.loads((log_dir / "evaluation.json").read_text())
    if code != 0 or summary["error"]:
        raise RuntimeError(f"evaluation of {checkpoint} failed (exit {code}): {summary['error']}; see {log_dir}")
    return summary


def cell(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def success_times(summary: dict) -> str:
    if summary["time_to_success_s_median"] is None:
        return "none succeeded"
    return f"{summary['time_to_success_s_median']:.2f} s ({summary['time_to_success_s_mean']:.2f} s)"
