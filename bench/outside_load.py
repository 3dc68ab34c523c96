"""How much CPU work outside the benchmark used while it ran: the test of whether a run was quiet.

These machines are shared (2 cores), and a benchmark's ratio means nothing
when something else took a core halfway through. So every benchmark records
the cores used by processes that are not its own, before it starts and while
it runs, and a goal is judged only from runs where that stayed under
``QUIET_CORES`` (docs/reference/benchmarks.md says so next to each result).

"Its own" is this process and every descendant (nodes, stand-ins, fresh-
process runs). A process's CPU time is found exactly once among the live
processes of the tree: in its own utime/stime while it lives, and in its
parent's cutime/cstime once reaped. A descendant orphaned to init drops out
of the tree and counts as outside work, which errs on the side of calling a
run disturbed.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

#: Outside work above this many cores makes a run disturbed (rerun it rather than judge from it).
QUIET_CORES = 0.3
TICKS = os.sysconf("SC_CLK_TCK")
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessTimes:
    pid: int
    parent: int
    ticks: int  # utime + stime + cutime + cstime


@dataclass(frozen=True)
class Sample:
    monotonic_s: float
    busy_ticks: int  # the whole machine's non-idle ticks, every CPU summed
    tree_ticks: int  # this benchmark's process tree


def busy_ticks(stat_text: str) -> int:
    """Non-idle ticks of the machine from /proc/stat's aggregate ``cpu`` line (guest time is in
    user already)."""
    fields = stat_text.splitlines()[0].split()
    assert fields[0] == "cpu", (
        f"/proc/stat should start with the aggregate cpu line, got {fields[:2]}"
    )
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[1:9])
    return user + nice + system + irq + softirq + steal


def process_times(stat_line: str) -> ProcessTimes:
    """One /proc/PID/stat line; the command name may hold spaces and parentheses, so split after
    the last ')'."""
    pid = int(stat_line.split(" ", 1)[0])
    rest = stat_line[stat_line.rindex(")") + 2 :].split()
    # rest[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
    return ProcessTimes(pid, int(rest[1]), sum(int(value) for value in rest[11:15]))


def tree_ticks(processes: list[ProcessTimes], root: int) -> int:
    """CPU ticks of ``root`` and its live descendants, each process counted once (see the module
    docstring)."""
    children: dict[int, list[ProcessTimes]] = {}
    for process in processes:
        children.setdefault(process.parent, []).append(process)
    by_pid = {process.pid: process for process in processes}
    total, stack = 0, [by_pid[root]] if root in by_pid else []
    while stack:
        process = stack.pop()
        total += process.ticks
        stack.extend(children.get(process.pid, ()))
    return total


def outside_cores(first: Sample, last: Sample) -> float:
    """Cores used by work outside the tree between two samples."""
    seconds = last.monotonic_s - first.monotonic_s
    if seconds <= 0:
        return 0.0
    outside = (last.busy_ticks - first.busy_ticks) - (last.tree_ticks - first.tree_ticks)
    return max(0.0, outside / TICKS / seconds)


def _read_processes() -> list[ProcessTimes]:
    processes = []
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                processes.append(process_times((entry / "stat").read_text()))
            except (OSError, ValueError, IndexError):
                continue  # it exited while we read
    return processes


def sample(root: int | None = None) -> Sample:
    root = os.getpid() if root is None else root
    return Sample(
        time.monotonic(),
        busy_ticks((PROC / "stat").read_text()),
        tree_ticks(_read_processes(), root),
    )


class OutsideLoad:
    """Samples the machine once a second from ``start()``: outside work before the run and during
    it."""

    def __init__(self, before_s: float = 2.0, period_s: float = 1.0) -> None:
        self.before_s, self.period_s = before_s, period_s
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._run_started: Sample | None = None

    def start(self) -> None:
        """Measure ``before_s`` of quiet before the benchmark starts anything, then keep
        sampling."""
        first = sample()
        time.sleep(self.before_s)
        self._run_started = sample()
        self.samples = [first, self._run_started]
        self._thread = threading.Thread(
            target=self._sample_forever, name="outside_load", daemon=True
        )
        self._thread.start()

    def _sample_forever(self) -> None:
        while not self._stop.wait(self.period_s):
            self.samples.append(sample())

    @property
    def started(self) -> bool:
        return self._run_started is not None

    def before_cores(self) -> float:
        return outside_cores(self.samples[0], self.samples[1])

    def during_cores(self) -> tuple[float, float]:
        """Mean over the run, and the worst 5-second window."""
        now = sample()
        during = list(self.samples[1:]) + [now]
        worst = 0.0
        for index, start in enumerate(during):
            for end in during[index + 1 :]:
                if end.monotonic_s - start.monotonic_s >= 5.0:
                    worst = max(worst, outside_cores(start, end))
                    break
        return outside_cores(during[0], now), worst

    def describe(self) -> str:
        """One line for the benchmark's section: was the run quiet enough to judge a goal from
        it?"""
        if not self.started:
            return _after_only(self.before_s)
        mean, worst = self.during_cores()
        before = self.before_cores()
        quiet = before < QUIET_CORES and mean < QUIET_CORES
        verdict = (
            "quiet"
            if quiet
            else f"DISTURBED: over {QUIET_CORES} cores, rerun before judging a goal"
        )
        return (
            f"CPU used outside the benchmark: {before:.2f} cores before, {mean:.2f} during "
            f"(worst 5 s: {worst:.2f}) - {verdict}."
        )


def _after_only(seconds: float) -> str:
    first = sample()
    time.sleep(seconds)
    cores = outside_cores(first, sample())
    verdict = "quiet" if cores < QUIET_CORES else f"DISTURBED: over {QUIET_CORES} cores"
    return (
        f"CPU used outside the benchmark: not recorded during the run; {cores:.2f} cores "
        f"in {seconds:g} s after it - {verdict}."
    )


#: The one recorder a benchmark process has: started by ``watch()``, read by report.write_section.
RECORDER = OutsideLoad()


def watch(before_s: float = 2.0) -> None:
    """Start recording outside work, once per process; call it before the benchmark starts any
    process."""
    if not RECORDER.started:
        RECORDER.before_s = before_s
        RECORDER.start()
