"""The record -> train -> serve -> evaluate loop as a user runs it, CI-sized.

``regenerate --install`` records two expert episodes (sim_robot_node and
episode_recorder_node as processes), trains ACT for two steps with LeRobot's
training loop, evaluates the checkpoint on one episode through server,
executor and sim, and installs it with that score; the demo then picks it
as its default policy. Two steps teach the policy nothing, so the test
checks the loop and its bookkeeping, not the score (docs/benchmarks.md has
the trained policy's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from lerobot_ros.server.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES


def test_regenerate_records_trains_evaluates_and_installs_what_the_demo_then_serves(tmp_path, monkeypatch):
    # Its own ROS domain: the suite's shared server also answers at /lerobot, where the evaluation's server runs.
    domain = str(1 + (int(os.environ["ROS_DOMAIN_ID"]) + 70) % 100)
    cache, work = tmp_path / "cache", tmp_path / "reach"
    env = {**os.environ, "ROS_DOMAIN_ID": domain, "LEROBOT_ROS_CACHE": str(cache)}
    result = subprocess.run(
        [sys.executable, "-m", "lerobot_ros.recording.regenerate", "--work-dir", str(work), "--episodes", "2",
         "--steps", "2", "--batch-size", "2", "--install", "--evaluate-episodes", "1"],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert (summary["episodes_written"], summary["steps"], summary["seed"]) == (2, 2, 0)

    contract = json.loads((work / "checkpoint" / CONTRACT_FILE).read_text())
    assert contract["action_names"] == list(SO101_JOINT_NAMES) and contract["fps"] == 30
    assert contract["training"]["steps"] == 2 and contract["training"]["dataset"] == "dataset"

    evaluation = json.loads((work / "evaluation" / "evaluation.json").read_text())
    assert evaluation["error"] == "" and evaluation["episodes"] == 1, evaluation
    assert evaluation["outcomes"][0]["outcome"] in ("SUCCESS", "FAILURE")
    assert set(evaluation["exit_codes"].values()) == {0}, evaluation["exit_codes"]
    assert evaluation["latency_ms_p50"] > 0, "the evaluated policy served chunks"
    assert open(evaluation["plot"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"

    from lerobot_ros.demo import resolve_policy
    from lerobot_ros.recording.trained_policy import evaluation_line, installed_trained_policy

    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(cache))
    installed = installed_trained_policy()
    assert installed is not None and summary["installed"] == str(installed)
    assert json.loads((installed / CONTRACT_FILE).read_text()) == contract
    assert f"in {evaluation['successes']} of 1 evaluation episodes" in evaluation_line(installed)
    assert resolve_policy("auto", tmp_path / "unused") == ("trained", installed)
