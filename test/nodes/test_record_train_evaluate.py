"""The record -> train -> serve -> evaluate loop as a user runs it, CI-sized.

``regenerate --install`` records two expert episodes (sim_robot_node and
episode_recorder_node as processes), trains ACT for two steps with LeRobot's
training loop, evaluates the checkpoint on one episode through server,
executor and sim, and installs it with that score; the demo then picks it
as its default policy. Two steps teach the policy nothing, so the test
checks the loop and its bookkeeping, not the score (docs/reference/benchmarks.md has
the trained policy's). A tiny SmolVLA then trains on the same recorded
dataset and serves one episode with real-time chunking and an injected
delay: the path of the RTC comparison (bench/rtc_reach_evaluation.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from support import domains

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_record_train_evaluate")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """``regenerate --install`` run once: (work dir, its summary, the cache it installed into, its
    environment)."""
    tmp_path = tmp_path_factory.mktemp("regenerate")
    # Its own ROS domain: the suite's shared server also answers at /lerobot, where the
    # evaluation's server runs.
    domain = str(domains.domain("record_train"))
    cache, work = tmp_path / "cache", tmp_path / "reach"
    env = {**os.environ, "ROS_DOMAIN_ID": domain, "LEROBOT_ROS_CACHE": str(cache)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.recording.regenerate",
            "--work-dir",
            str(work),
            "--episodes",
            "2",
            "--steps",
            "2",
            "--batch-size",
            "2",
            "--install",
            "--evaluate-episodes",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return work, json.loads(result.stdout.strip().splitlines()[-1]), cache, env


def test_regenerate_records_trains_evaluates_and_installs_what_the_demo_then_serves(
    regenerated, tmp_path, monkeypatch
):
    work, summary, cache, _ = regenerated
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
    from lerobot_ros.policy_names import installed_trained_policy
    from lerobot_ros.recording.trained_policy import evaluation_line

    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(cache))
    installed = installed_trained_policy()
    assert installed is not None and summary["installed"] == str(installed)
    assert json.loads((installed / CONTRACT_FILE).read_text()) == contract
    assert f"in {evaluation['successes']} of 1 evaluation episodes" in evaluation_line(installed)
    assert resolve_policy("auto", tmp_path / "unused") == ("trained", installed)


def test_a_smolvla_trained_on_the_recorded_dataset_serves_with_real_time_chunking(
    regenerated, tmp_path
):
    work, _, _, env = regenerated
    checkpoint = tmp_path / "smolvla"
    trained = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.recording.train",
            "--policy",
            "smolvla",
            "--dataset",
            str(work / "dataset"),
            "--output",
            str(checkpoint),
            "--steps",
            "2",
            "--batch-size",
            "2",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    contract = json.loads((checkpoint / CONTRACT_FILE).read_text())
    assert contract["training"]["policy"] == "smolvla" and contract["training"]["steps"] == 2
    assert json.loads((checkpoint / "config.json").read_text())["type"] == "smolvla"
    assert (checkpoint / "vlm" / "config.json").is_file(), (
        "the tiny VLM travels with the checkpoint"
    )

    output = tmp_path / "evaluation"
    evaluated = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.recording.evaluate",
            "--checkpoint",
            str(checkpoint),
            "--episodes",
            "1",
            "--rtc",
            "on",
            "--inject-delay-s",
            "0.05",
            "--output-dir",
            str(output),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]
    evaluation = json.loads((output / "evaluation.json").read_text())
    assert evaluation["episodes"] == 1 and set(evaluation["exit_codes"].values()) == {0}, (
        evaluation
    )
    assert (evaluation["rtc_requested"], evaluation["inject_delay_s"]) == (True, 0.05)
    assert evaluation["rtc_active"] is True, "the trained SmolVLA ran in replace mode with RTC"
    assert evaluation["latency_ms_p50"] >= 50.0, "every chunk carried the injected delay"
