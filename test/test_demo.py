"""The README's demo command runs to completion and says so in JSON."""

import json
import os
import subprocess
import sys

from lerobot_ros.sim.default_policy import DEFAULT_POLICY_NAME, default_checkpoint


def test_demo_runs_the_two_nodes_end_to_end_and_caches_its_policy(tmp_path, monkeypatch):
    # Its own ROS domain: the suite's shared server also answers at /lerobot.
    domain = str(1 + (int(os.environ["ROS_DOMAIN_ID"]) + 50) % 100)
    env = {**os.environ, "ROS_DOMAIN_ID": domain, "LEROBOT_ROS_CACHE": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "lerobot_ros.demo"], env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True
    assert summary["matching_robot"]["handshake"] == "accepted"
    assert summary["matching_robot"]["exit_code"] == 0
    assert summary["swapped_joints_robot"]["handshake"] == "refused"
    assert "policy expects ['shoulder_pan', 'shoulder_lift'" in summary["swapped_joints_robot"]["reason"]
    assert summary["server_exit_code"] == 0

    checkpoint = tmp_path / "policies" / DEFAULT_POLICY_NAME
    weights = checkpoint / "model.safetensors"
    built_at = weights.stat().st_mtime_ns
    monkeypatch.setenv("LEROBOT_ROS_CACHE", str(tmp_path))
    assert default_checkpoint() == checkpoint
    assert weights.stat().st_mtime_ns == built_at, "a cached policy must not be rebuilt"
    assert not [path for path in checkpoint.parent.iterdir() if path.name.startswith(".")], "staging dirs left over"
