"""The benchmark scripts keep working: each runs with ``--smoke`` (tiny sizes).

Each script (bench.server_request_latency, executor_jitter, starvation,
capacity, batching, compiled_forward, accelerator_capacity, admission_workers; below them flood,
abuse_soak and forward_curve) runs as its own process, ``python -m
bench.<name>`` from the repository root as documented, one after the other,
writing its section and plot into a temporary folder (never docs/), bounded
in time; the test checks its exit code, its section (command line, a table,
the plot's link) and its PNG, and where a script names one (OUTCOMES), a row
saying the run did its job (commands received, RTC active). Timing numbers
are not checked: on a shared 2-core machine they mean nothing at these sizes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from support.paths import REPO

SCRIPTS = {
    "server_request_latency": "bench_latency_breakdown.png",
    "executor_jitter": "bench_jitter.png",
    "starvation": "bench_starvation.png",
    "capacity": "bench_capacity.png",
    "batching": "bench_batching.png",
    "compiled_forward": "bench_compiled_forward.png",
    "accelerator_capacity": "bench_accelerator_capacity.png",
    "admission_workers": "bench_admission_workers.png",
}
#: A table row that shows the smoke run did what it is there for, beyond writing a section.
OUTCOMES = {
    # both streams received
    "executor_jitter": r"30 Hz policy interpolated \| [1-9]\d* / \d+ \([1-9]\d*\) \|",
    # replace mode ran with RTC active
    "starvation": r"\| SmolVLA, RTC replace \| 50 ms \|.*\| yes \|",
    # dynamo compiled graphs
    "compiled_forward": r"\| ACT 96x128, 1 camera \|.*\| [1-9]\d* \| no \| [0-9.e+-]+ \|",
    # two paced robots answered through the modeled accelerator, none failed
    # both admission variants prepared requests beside the modeled forward
    "admission_workers": r"\| threads \| 1 \| 0.5 \| \*\*[1-9]\d*\*\*(.|\n)*\| processes \| 1 \| "
    r"0.5 \| \*\*[1-9]\d*\*\*",
    "accelerator_capacity": r"\| 2 \| serial \| \d+ / \d+ / \d+ ms \| \d+ ms \| [0-9.]+ \| "
    r"[0-9.]+ \| \d+ % \|.*\| 0 \| [0-9.]+ cores",
}
TIMEOUT_S = 300


def run_bench(
    argv: list[str], env: dict | None = None, timeout_s: float = TIMEOUT_S
) -> subprocess.CompletedProcess:
    """``python -m <argv>`` from the repository root, bounded by ``timeout_s``, in its own process
    group.

    A script that overruns gets SIGUSR1 first (bench.common prints every thread's stack on it), so
    the failure shows where it waited; then its whole group is killed, the servers it started
    included, so they cannot load the rest of the suite. The group is killed after a normal exit
    too: nothing a script leaves behind outlives its test.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGUSR1)
        try:
            process.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        kill_group(process.pid)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"{argv[0]} did not finish in {timeout_s:g} s:\n{stdout[-3000:]}\n"
            f"its threads when stopped:\n{stderr[-6000:]}"
        )
    finally:
        kill_group(process.pid)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def kill_group(group: int) -> None:
    try:
        os.killpg(group, signal.SIGKILL)
    except ProcessLookupError:
        pass


def smoke_section(
    tmp_path, name: str, document: str = "benchmarks.md", timeout_s: float = TIMEOUT_S
) -> str:
    """``python -m bench.<name> --smoke`` writing into a document of its own; its section, once the
    script exited 0 and wrote the section with the command that made it."""
    # Each script isolates its own ROS graph in LEROBOT_ROS_TEST_DOMAIN_ID: this worker's benchmark
    # domain (support/domains.py), which no other worker and no other test of this one uses.
    env = dict(os.environ)
    path = tmp_path / document
    run = run_bench([f"bench.{name}", "--smoke", "--document", str(path)], env, timeout_s)
    assert run.returncode == 0, (
        f"bench.{name} --smoke exited "
        f"{run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    )
    text = path.read_text()
    assert f"<!-- bench:{name} -->" in text and f"python -m bench.{name} --smoke" in text, text
    return text


@pytest.mark.timeout(TIMEOUT_S + 30)
@pytest.mark.parametrize("name", list(SCRIPTS))
def test_benchmark_script_smoke(tmp_path, name):
    # Each script isolates its own ROS graph (a domain from its pid), as the suite does.
    env = dict(os.environ)  # the worker's benchmark domain, as in smoke_section
    document = tmp_path / "benchmarks.md"
    docs_before = {
        path: path.stat().st_mtime_ns for path in (REPO / "docs" / "reference").glob("bench_*.png")
    }
    run = run_bench(
        [f"bench.{name}", "--smoke", "--document", str(document), "--plot-dir", str(tmp_path)], env
    )
    assert run.returncode == 0, (
        f"bench.{name} --smoke exited "
        f"{run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    )
    text = document.read_text()
    assert f"<!-- bench:{name} -->" in text and f"<!-- /bench:{name} -->" in text
    assert f"python -m bench.{name} --smoke" in text
    assert "|---|" in text, "the section has no table"
    if name in OUTCOMES:
        assert re.search(OUTCOMES[name], text), f"no row matching {OUTCOMES[name]!r}:\n{text}"
    png = tmp_path / SCRIPTS[name]
    assert png.is_file() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no plot {png}"
    assert f"]({SCRIPTS[name]})" in text, "the section does not show its plot"
    docs_after = {
        path: path.stat().st_mtime_ns for path in (REPO / "docs" / "reference").glob("bench_*.png")
    }
    assert docs_after == docs_before, "a smoke run wrote a plot into docs/"


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_flood_benchmark_smoke(tmp_path):
    """bench.flood --smoke: two robots, a short flood pinned to one core; its section says the
    flooding session was closed and its re-open refused, with a share before and after the closure
    for each robot."""
    text = smoke_section(tmp_path, "flood", "reliability.md")
    assert re.search(r"\| robot_a \| [0-9.]+ \| \d+% \| \d+% \|", text), text
    assert "re-open was refused with code 12" in text, text


FLEET_TIMEOUT_S = 480  # three servers load at once, and each fault restarts one


@pytest.mark.serial  # which move wins a drain (drain or hedge) and empty ticks are timing
@pytest.mark.timeout(FLEET_TIMEOUT_S + 30)
def test_fleet_failover_smoke(tmp_path):
    """bench.fleet_failover --smoke: three replicas, one RTC robot with a warm standby, one kill -9
    and one drain of its serving replica; the section has a row per fault with the move, and the
    requests per chunk."""
    text = smoke_section(tmp_path, "fleet_failover", timeout_s=FLEET_TIMEOUT_S)
    assert re.search(r"\| RTC replace \| kill -9 \| 1 \| [01] \|", text), text
    assert re.search(r"\| RTC replace \| SIGTERM drain \| 1 \| [01] \|.*drain 1", text), text
    assert re.search(r"\| RTC replace \| \*\*[0-9.]+\*\* \(5 s\) \| [0-9.]+ \| \d+ \(", text), text


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_abuse_soak_smoke(tmp_path):
    """bench.abuse_soak --smoke: one abuse cycle against server, sim and executor; nothing crashes,
    no open for the
    streaming robot's id is accepted, and its row says so."""
    text = smoke_section(tmp_path, "abuse_soak", "reliability.md")
    assert re.search(r"\| 1 \| [0-9.]+ \| 1 \| 0  \| True \| 200 / 0 \|", text), text


@pytest.mark.timeout(TIMEOUT_S + 30)
def test_forward_curve_smoke(tmp_path):
    """bench.forward_curve --small: the GPU script's CPU rehearsal (ACT only: pi0/pi0.5 take
    minutes on a CPU even
    at one layer per Gemma); the JSON has a timed point per batch size, the fitted line and a GIL
    share in [0, 1]."""
    out = tmp_path / "forward_curve.json"
    run = run_bench(
        [
            "bench.forward_curve",
            "--small",
            "--device",
            "cpu",
            "--policies",
            "act",
            "--batches",
            "1,2",
            "--repeats",
            "1",
            "--warmup",
            "1",
            "--gil-seconds",
            "0.2",
            "--out",
            str(out),
        ]
    )
    assert run.returncode == 0, (
        f"bench.forward_curve exited {run.returncode}:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    )
    result = json.loads(out.read_text())
    act = result["policies"]["act"]
    assert result["small"] is True and result["versions"]["device"] == "cpu"
    assert sorted(act["t_ms"]) == ["1", "2"] and all(
        point["median_ms"] > 0 for point in act["t_ms"].values()
    )
    assert 0.0 <= act["g"] <= 1.0 and act["parameters_m"] > 1.0


@pytest.mark.timeout(FLEET_TIMEOUT_S + 30)
def test_fleet_rebalancing_smoke(tmp_path):
    """bench.fleet_rebalancing --smoke: three robots on one replica, a second comes up; its row
    says how long until
    2/1, how many moves, and whether the fleet stayed 2/1."""
    text = smoke_section(tmp_path, "fleet_rebalancing", timeout_s=FLEET_TIMEOUT_S)
    assert re.search(
        r"\| 1 \| \*\*[0-9.]+\*\* / [0-9.]+ / [0-9.]+ s \| [12] \| 1 of 1 \|", text
    ), text
    assert "rebalancing: /bench_rebal_0 serves 3 robots" in text, text
