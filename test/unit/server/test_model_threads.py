"""Loading and warming up happen on a passing thread, so only the inference worker keeps an OpenMP
pool."""

from __future__ import annotations

import os
import threading
import time

import pytest

from lerobot_ros.server.policy.model_threads import run_on_passing_thread
from lerobot_ros.server.policy.startup import StartupFailed, ready_runner
from lerobot_ros.server.settings import ServerSettings


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settle_below(limit: int, timeout_s: float = 10.0) -> int:
    deadline = time.monotonic() + timeout_s
    while _threads() > limit and time.monotonic() < deadline:
        time.sleep(0.05)
    return _threads()


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, line: str) -> None:
        self.lines.append(line)

    warning = info


def test_the_job_runs_on_another_thread_that_has_ended_and_its_result_or_error_comes_back():
    ran_on = {}

    def job():
        ran_on["thread"] = threading.current_thread()
        return 42

    assert run_on_passing_thread(job, name="probe") == 42
    assert ran_on["thread"] is not threading.current_thread() and not ran_on["thread"].is_alive()
    with pytest.raises(KeyError, match="missing"):
        run_on_passing_thread(lambda: {}["missing"], name="probe")


def test_a_passing_thread_takes_its_openmp_pool_with_it():
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(2)  # a server's torch_threads may have left 1, which opens no pool
    try:
        _check_the_pool_goes_with_its_thread(torch)
    finally:
        torch.set_num_threads(previous)


def _check_the_pool_goes_with_its_thread(torch):
    before = _settle_below(10_000, 0.0)
    large = torch.rand(4_000_000)
    seen = {}

    def parallel_work():
        (large * 2).sum()  # past torch's grain size: an OpenMP parallel region
        seen["during"] = _threads()

    run_on_passing_thread(parallel_work, name="probe")
    assert seen["during"] > before  # the pool existed (the thread itself and its helpers)
    assert _settle_below(before) <= before


def test_ready_runner_still_loads_warms_up_and_reports_a_bad_checkpoint_through_the_passing_thread(
    act_checkpoint, tmp_path
):
    import torch

    settings = ServerSettings.from_values(
        {"checkpoint": str(act_checkpoint), "warmup_inferences": 1, "torch_threads": 1}
    )
    log = _Log()
    previous = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        runner = ready_runner(settings, log)
        # torch's count is per process for threads that enter it later, as the inference worker
        # does
        assert run_on_passing_thread(torch.get_num_threads, name="probe") == 1
    finally:
        torch.set_num_threads(previous)
    assert runner.capabilities.policy_type == "act"
    assert any(line.startswith("warm-up done") for line in log.lines)
    # passes the path checks, fails in LeRobot's loader
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(StartupFailed, match="cannot load LeRobot checkpoint"):
        ready_runner(ServerSettings.from_values({"checkpoint": str(tmp_path)}), log)
    # A path that names nothing is refused before the thread starts, so before torch is imported.
    with pytest.raises(StartupFailed, match="'/does_not_exist' is not a directory"):
        ready_runner(ServerSettings.from_values({"checkpoint": "/does_not_exist"}), log)
