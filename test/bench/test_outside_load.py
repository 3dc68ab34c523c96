"""The quiet-machine check every benchmark writes next to its results (bench/outside_load.py)."""

import subprocess
import sys
import time

from bench import outside_load
from bench.outside_load import ProcessTimes, Sample


def test_a_command_name_with_spaces_and_parentheses_parses():
    # Fields 14-17 (utime stime cutime cstime) = 7 11 13 17 ticks; ppid (field 4) = 1.
    line = "4242 (weird ) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 11 13 17 20 0 1 0 5 1000 10"
    assert outside_load.process_times(line) == ProcessTimes(4242, 1, 48)


def test_busy_ticks_leave_out_idle_and_iowait():
    assert (
        outside_load.busy_ticks("cpu  10 1 5 1000 50 2 3 4 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n") == 25
    )


def test_each_process_of_the_tree_counts_once_alive_or_reaped_and_strangers_never():
    alive = [
        ProcessTimes(10, 1, 100),
        ProcessTimes(11, 10, 40),
        ProcessTimes(12, 11, 5),
        ProcessTimes(99, 1, 500),
    ]
    assert outside_load.tree_ticks(alive, 10) == 145
    # 12 exits and 11 reaps it: its 5 ticks move into 11's cutime, and still count once.
    reaped = [ProcessTimes(10, 1, 100), ProcessTimes(11, 10, 45), ProcessTimes(99, 1, 500)]
    assert outside_load.tree_ticks(reaped, 10) == 145
    assert outside_load.tree_ticks(alive, 404) == 0


def test_outside_cores_is_the_machines_busy_time_less_the_trees():
    ticks = outside_load.TICKS
    # 3 CPU-s busy, 2 of them ours, in 2 s
    first, last = (
        Sample(0.0, 0, 0),
        Sample(2.0, 3 * ticks, 2 * ticks),
    )
    assert abs(outside_load.outside_cores(first, last) - 0.5) < 1e-9


def test_a_busy_child_is_counted_as_the_benchmarks_own_work():
    before = outside_load.sample()
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 1.0\nwhile time.time() < end: pass",
        ]
    )
    assert child.wait(timeout=30) == 0
    after = outside_load.sample()
    # The child burned up to a core for a second and was reaped: the tree's ticks hold it (a busy
    # shared machine may give it less than the whole second, never nothing).
    assert (after.tree_ticks - before.tree_ticks) / outside_load.TICKS >= 0.2, (before, after)


def test_a_process_outside_the_tree_is_outside_work():
    burn = "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass"
    # Started through a shell that exits at once: the burner is orphaned, so no longer a
    # descendant.
    subprocess.run(["sh", "-c", f"{sys.executable} -c '{burn}' &"], check=True, timeout=30)
    first = outside_load.sample()
    time.sleep(1.0)
    assert outside_load.outside_cores(first, outside_load.sample()) >= 0.3


def test_the_recorder_writes_one_line_with_a_verdict():
    recorder = outside_load.OutsideLoad(before_s=0.2, period_s=0.1)
    recorder.start()
    time.sleep(0.3)
    line = recorder.describe()
    assert line.startswith("CPU used outside the benchmark:") and (
        "quiet" in line or "DISTURBED" in line
    ), line
