"""Which threads may run torch: the inference worker, and passing threads that have ended.

Invariant: a thread that stays alive beside the inference worker (the main
thread, which spins rclpy) never runs a torch operation large enough to open
a parallel region, so the worker is the only live owner of an OpenMP pool.

Why: torch's CPU kernels run in OpenMP (libgomp) parallel regions, and
libgomp keeps one pool of helper threads per thread that ever opened a
region, until that thread ends. A main thread that loaded or warmed the model
keeps its pool; the worker then opens a second one. With more pool threads
alive than cores, libgomp stops spinning between regions and puts its
helpers to sleep after each one, and each of the thousands of small regions
in one forward pays a futex wake-up: the same ACT forward measured clearly
slower on the worker (docs/reference/benchmarks.md, "model time"). A thread that ends takes its
pool with it, so loading and warming up on a passing thread leave only the worker's.
(CUDA's caching allocator and cuDNN's autotuning caches are per process, so
a warm-up on another thread still warms the worker's requests.)

How many threads one forward uses is the ``torch_threads`` parameter, set
once for the process before loading (``use_torch_threads``): on a machine
whose cores are shared with other work, a pool as wide as the cores waits on
descheduled helpers at every region (torch's default measured several times
slower than 1 thread on the project's loaded 2-core machines: docs/reference/benchmarks.md).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_JOIN_POLL_S = 0.1


def use_torch_threads(count: int) -> None:
    """torch's intra-op thread count for the threads that first run torch after this call (the
    inference worker among them); 0 keeps torch's default (one per core)."""
    if count > 0:
        import torch

        torch.set_num_threads(count)


def run_on_passing_thread(job: Callable[[], T], name: str) -> T:
    """``job()`` on a new thread that has ended when this returns; its result, or its exception
    re-raised.

    The caller waits in short joins, so a signal handler that raises on the
    caller's thread (Ctrl-C during start-up) interrupts the wait at once; the
    thread is a daemon, so the process may then exit while it still loads.
    """
    outcome: dict = {}

    def body() -> None:
        try:
            outcome["result"] = job()
        except BaseException as error:  # noqa: BLE001 - handed to the caller whatever it is
            outcome["error"] = error

    thread = threading.Thread(target=body, name=name, daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(_JOIN_POLL_S)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]
