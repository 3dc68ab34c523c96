"""The README's demo command streams the whole loop and says so in JSON."""

import json
import os
import subprocess
import sys

import pytest

from lerobot_ros.policy_names import committed_trained_smolvla
from lerobot_ros.sim.default_policy import DEFAULT_POLICY_NAME, default_checkpoint
from support import domains


@pytest.mark.serial
def test_demo_streams_the_committed_trained_policy_and_a_random_one_is_built_once(
    tmp_path, monkeypatch
):
    # Its own ROS domain: the suite's shared server also answers at /lerobot.
    domain = str(domains.domain("demo"))
    env = {**os.environ, "ROS_DOMAIN_ID": domain, "LEROBOT_ROS_CACHE": str(tmp_path)}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.demo",
            "--duration",
            "8",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["final_state"] == "STREAMING"
    # An empty cache has no trained ACT: the default (auto) serves the trained SmolVLA committed
    # with the package, quotes its evaluation and says how to build the ACT.
    assert summary["policy"] == "trained_smolvla" and "--policy trained" in result.stdout
    assert "serving the trained reach SmolVLA: success in" in result.stdout
    assert summary["checkpoint"] == str(committed_trained_smolvla())
    assert summary["chunks_merged"] >= 2
    assert summary["commands_while_streaming"] >= 0.5 * 30 * summary["streamed_s"]
    assert summary["starvation_ticks_after_warmup"] == 0, summary
    assert 0 < summary["latency_ms_p50"] <= summary["latency_ms_p95"]
    assert summary["exit_codes"] == {"chunk_executor": 0, "sim_robot": 0, "lerobot": 0}
    assert open(summary["plot"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    assert "STREAMING" in result.stdout and "latency p50" in result.stdout  # the live status line
    # Issue 33: "fallback ticks" rising next to "0 after warm-up" read as a failure; they are the
    # holds of start-up and episode resets, and a dropped chunk says why.
    assert "holds (start-up, resets)" in result.stdout and "fallback ticks" not in result.stdout
    assert "last_drop_reason" in summary and bool(summary["last_drop_reason"]) == bool(
        summary["chunks_dropped"]
    )
    audit = (tmp_path / "out" / "audit.jsonl").read_text().splitlines()
    assert len(audit) >= summary["chunks_merged"] and json.loads(audit[0])["client"] == "sim_arm"

    assert not (tmp_path / "policies").exists(), "the committed policy needs no build"
    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(tmp_path))
    checkpoint = tmp_path / "policies" / DEFAULT_POLICY_NAME
    assert default_checkpoint() == checkpoint  # built now, for --policy act
    weights = checkpoint / "model.safetensors"
    built_at = weights.stat().st_mtime_ns
    assert default_checkpoint() == checkpoint
    assert weights.stat().st_mtime_ns == built_at, "a cached policy must not be rebuilt"
    assert not [path for path in checkpoint.parent.iterdir() if path.name.startswith(".")], (
        "staging dirs left over"
    )
