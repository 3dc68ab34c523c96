"""A smoke run of the soak command (bench.soak), so CI keeps the one-command soak working.

The real soak (`python -m bench.soak --minutes 5`) is not part of the suite;
this runs the same command for a few seconds with two executors, into a
temporary document, and checks its verdict and what it wrote.
"""

from __future__ import annotations

import json
import subprocess
import sys

from support.paths import REPO


def test_soak_command_runs_checks_and_writes_its_section(act_checkpoint, tmp_path):
    document = tmp_path / "reliability.md"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.soak",
            "--minutes",
            "0.1",
            "--executors",
            "2",
            "--sample-s",
            "1",
            "--checkpoint",
            str(act_checkpoint),
            "--document",
            str(document),
            "--output-dir",
            str(tmp_path / "soak"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.stdout.strip(), result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, summary["problems"]
    assert summary["sessions_streaming"] == 2 and summary["server_endpoints_streaming"] == 4
    assert summary["sessions_after"] == 0 and summary["server_endpoints_after"] == 0
    assert summary["heartbeats"]["received"] >= 8 and summary["heartbeats"]["missed"] == 0
    for row in summary["audit"].values():
        assert (
            row["requests_sent"] > 0
            and row["requests_sent"] == row["audit_lines"] + row["superseded"]
        )
    assert all(m["start_mb"] > 0 for m in summary["memory"].values())
    text = document.read_text()
    assert (
        "<!-- bench:soak -->" in text and "Command: `python -m bench.soak --minutes 0.1`" in text
    )
    assert "all checks passed" in text
