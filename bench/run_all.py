"""Regenerate every benchmark section of docs/reference/benchmarks.md and its plot, one script
after the other.

Runs bench.server_request_latency, compiled_forward, executor_jitter, starvation, capacity,
rtc_smoothness, batching, reach_evaluation (which needs the trained ACT installed) and
rtc_reach_evaluation (the committed trained SmolVLA) with their default (full) sizes, each ``python
-m bench.<name>`` in a process of its own so one failure does not hide the others' results; extra
arguments (e.g. ``--smoke``) are passed to every script. The latency matrix alone took 17 minutes
on 2 cores shared with other work (load 7-10).

usage: python -m bench.run_all [--smoke]
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

SCRIPTS = (
    "server_request_latency",
    "compiled_forward",
    "executor_jitter",
    "starvation",
    "capacity",
    "rtc_smoothness",
    "batching",
    "reach_evaluation",
    "rtc_reach_evaluation",
)


def main() -> int:
    repo = Path(__file__).resolve().parents[1]
    failed = []
    for name in SCRIPTS:
        started = time.monotonic()
        code = subprocess.run(
            [sys.executable, "-m", f"bench.{name}", *sys.argv[1:]], cwd=repo, timeout=1800
        ).returncode
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
