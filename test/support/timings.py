"""Where the suite's time goes: per test phase, the wall time, the CPU the whole machine used
meanwhile, and the processes the test started.

Off unless ``LEROBOT_ROS_TEST_TIMINGS`` names a file; each phase (setup, call, teardown) of each
test appends one JSON line to it, so parallel workers can share the file.
``scripts/test_durations.py`` groups the lines into the table of docs/reference/setup.md.

The machine's CPU comes from /proc/stat, so it counts the servers and robots a test started as
well as pytest itself; it only means "this test's CPU" when nothing else runs, i.e. in a run
without parallel workers.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

#: The file the lines go to, or None when timing is off.
TIMINGS_FILE = os.environ.get("LEROBOT_ROS_TEST_TIMINGS") or None

_processes_started = 0
# Bound now: some tests replace time.monotonic with a fake clock.
_monotonic = time.monotonic


def machine_busy_cpu_s() -> float:
    """CPU seconds all cores spent outside idle and iowait since boot."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _count_process_starts() -> None:
    global _processes_started
    original_init = subprocess.Popen.__init__

    def counting_init(self, *args, **kwargs):
        global _processes_started
        _processes_started += 1
        original_init(self, *args, **kwargs)

    subprocess.Popen.__init__ = counting_init


class PhaseTimer:
    """Measures one phase of one test and appends its line."""

    def __init__(self, nodeid: str, phase: str):
        self.nodeid = nodeid
        self.phase = phase

    def __enter__(self):
        self.processes = _processes_started
        self.cpu = machine_busy_cpu_s()
        self.wall = _monotonic()
        return self

    def __exit__(self, *exc):
        line = {
            "nodeid": self.nodeid,
            "phase": self.phase,
            "wall_s": round(_monotonic() - self.wall, 3),
            "machine_cpu_s": round(machine_busy_cpu_s() - self.cpu, 2),
            "processes": _processes_started - self.processes,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
        }
        with open(TIMINGS_FILE, "a") as out:
            out.write(json.dumps(line) + "\n")
        return False


if TIMINGS_FILE:
    _count_process_starts()
