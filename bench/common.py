"""What the benchmark scripts share: isolation, outputs, processes, statistics, ROS watchers.

The benchmarks are the package ``bench``, run from the repository root as
``python -m bench.<name>``, so this checkout's ``lerobot_ros`` is the one
imported. Every benchmark script imports this module FIRST: it isolates the
ROS graph (own ROS_DOMAIN_ID, localhost-only discovery) and keeps the
Hugging Face Hub offline, exactly as test/conftest.py does for the test
suite, and puts this checkout on the PYTHONPATH of every process a
benchmark starts (nodes, stand-ins, its own fresh-process runs), whatever
their working directory.

Outputs: each script takes ``--smoke`` (tiny sizes, seconds), ``--document``
(the Markdown file its section goes to; default docs/reference/benchmarks.md, a
temporary file under ``--smoke``) and ``--plot-dir`` (where its PNG goes;
default docs/reference/, the document's folder under ``--smoke``), so a smoke run never
touches docs/.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
# This checkout's lerobot_ros (and bench) for the processes a benchmark starts: not whichever
# checkout the environment happens to have installed, and found from any working directory.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))

# Always override: the shell may point at a domain with real robots in it.
os.environ["ROS_DOMAIN_ID"] = os.environ.get("LEROBOT_ROS_TEST_DOMAIN_ID") or str(
    1 + os.getpid() % 100
)
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")

import matplotlib  # noqa: E402

matplotlib.use("Agg")

from bench import outside_load  # noqa: E402
from bench.report import BENCHMARKS_MD, DOCS, table_row, write_section  # noqa: E402,F401

TICKS = os.sysconf("SC_CLK_TCK")
# SIGUSR1 prints every thread's stack to stderr: a run that stops making progress shows where it
# waits (the smoke tests send it before they kill a script that overran its time).
faulthandler.register(signal.SIGUSR1, all_threads=True)


# ---------------------------------------------------------------- arguments


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds); writes to a temporary document"
    )
    parser.add_argument(
        "--document",
        type=Path,
        default=None,
        help="Markdown file for the section (default docs/reference/benchmarks.md)",
    )
    parser.add_argument(
        "--plot-dir", type=Path, default=None, help="folder for the PNG (default docs/reference/)"
    )


def outputs(args) -> tuple[Path, Path]:
    """(document, plot folder); a smoke run without --document writes to a temporary folder.

    Called as a benchmark starts, so it also starts recording the CPU that
    work outside the benchmark uses (a smoke measures a shorter quiet spell).
    """
    outside_load.watch(before_s=0.5 if args.smoke else 2.0)
    if args.document is None:
        args.document = (
            Path(tempfile.mkdtemp(prefix="bench_smoke_")) / "benchmarks.md"
            if args.smoke
            else BENCHMARKS_MD
        )
    if args.plot_dir is None:
        args.plot_dir = (
            DOCS if args.document.resolve() == BENCHMARKS_MD.resolve() else args.document.parent
        )
    args.plot_dir.mkdir(parents=True, exist_ok=True)
    return args.document, args.plot_dir


def image_link(document: Path, png: Path) -> str:
    """The path of ``png`` as the document should reference it."""
    try:
        return str(png.resolve().relative_to(document.resolve().parent))
    except ValueError:
        return str(png.resolve())


# --------------------------------------------------------------- statistics


def percentile(values, q: float) -> float:
    """Nearest-rank percentile, q in [0, 1]; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def median(values) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def ms(seconds: float, digits: int = 1) -> str:
    return f"{seconds * 1000:.{digits}f}"


# ---------------------------------------------------------------- processes


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wait_for_log(process: subprocess.Popen, log: Path, text: str, timeout_s: float) -> None:
    """Wait (bounded) until ``text`` appears in ``log``; raise with the log's tail otherwise."""
    deadline = time.monotonic() + timeout_s
    while text not in (log.read_text(errors="replace") if log.exists() else ""):
        if process.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise RuntimeError(
                f"{log.name}: {text!r} did not appear within {timeout_s:.0f} s (exit "
                f"{process.poll()}):\n{tail}"
            )
        time.sleep(0.1)


def start_server(
    directory: Path, node_name: str, parameters: dict, timeout_s: float = 240.0
) -> subprocess.Popen:
    """policy_server_node as a process, waited for until it serves (bounded)."""
    from lerobot_ros.processes import spawn_node

    log_path = directory / f"{node_name}.log"
    with log_path.open("w") as log:
        server = spawn_node(
            "lerobot_ros.server.node",
            {"audit_log": "off", "device": "cpu", **parameters},
            log=log,
            node_name=node_name,
        )
    try:
        wait_for_log(server, log_path, "ready: serving", timeout_s)
    except BaseException:
        from lerobot_ros.processes import stop

        stop(server)
        raise
    return server


def start_executor(directory: Path, node_name: str, parameters: dict, env: dict | None = None):
    """chunk_executor_node; ``env`` overrides variables (e.g. PYTHONPATH: another checkout's
    executor)."""
    from lerobot_ros.processes import spawn_node

    with (directory / f"{node_name}.log").open("w") as log:
        return spawn_node(
            "lerobot_ros.executor.node", parameters, log=log, node_name=node_name, env=env
        )


def start_script(directory: Path, name: str, argv: list[str]) -> subprocess.Popen:
    """A helper process, ``python <argv>`` (a stand-in: ``-m lerobot_ros.standins.<name> ...``),
    output to a log file."""
    with (directory / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            [sys.executable, *argv], stdout=log, stderr=subprocess.STDOUT, text=True
        )


def stop_all(processes) -> None:
    from lerobot_ros.processes import stop

    for process in reversed([p for p in processes if p is not None]):
        stop(process)


# ------------------------------------------------------------- ROS watchers


class Watcher:
    """An rclpy node spun in a background thread that keeps the latest ExecutorStatus
    of each executor and every ActionChunk it hears, with the receive instant.

    The chunk echoes the executor's ``sent_monotonic_ns``; on one host
    CLOCK_MONOTONIC is shared by all processes, so ``received_ns - sent`` is the
    round trip as a third process sees it (within one DDS delivery of the executor's own).
    """

    def __init__(self, name: str = "bench_watcher") -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        if not rclpy.ok():
            rclpy.init()
        self.node = rclpy.create_node(f"{name}_{os.getpid()}")
        self.lock = threading.Lock()
        self.status: dict[str, object] = {}
        self.chunks: dict[str, list[tuple[int, object]]] = defaultdict(list)
        self._executor = SingleThreadedExecutor()
        self._executor.add_node(self.node)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self._executor.spin_once(timeout_sec=0.05)

    def watch_status(self, executor_name: str) -> None:
        from lerobot_ros.msg import ExecutorStatus
        from lerobot_ros.protocol.qos import STATUS_QOS

        def keep(msg, name=executor_name):
            with self.lock:
                self.status[name] = msg

        self.node.create_subscription(ExecutorStatus, f"/{executor_name}/status", keep, STATUS_QOS)

    def watch_chunks(self, server_namespace: str, client_id: str) -> None:
        from lerobot_ros.msg import ActionChunk
        from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS

        def keep(msg, client=client_id):
            received = time.monotonic_ns()
            with self.lock:
                self.chunks[client].append((received, msg))

        topic = f"{server_namespace.rstrip('/')}/clients/{client_id}/action_chunk"
        self.node.create_subscription(ActionChunk, topic, keep, ACTION_CHUNK_QOS)

    def latest(self, executor_name: str):
        with self.lock:
            return self.status.get(executor_name)

    def wait(self, predicate, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                if predicate():
                    return True
            time.sleep(0.05)
        with self.lock:
            return bool(predicate())

    def wait_streaming(
        self, names, min_chunks: int, timeout_s: float, processes=(), states=("STREAMING",)
    ) -> bool:
        """Until every named executor is in one of ``states`` with ``min_chunks`` merged; False at
        the
        timeout or as soon as one of ``processes`` has exited (a refused handshake exits at
        once)."""

        def ready():
            return all(
                (s := self.status.get(n)) is not None
                and s.state_name in states
                and s.chunks_merged >= min_chunks
                for n in names
            )

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.wait(ready, 0.5):
                return True
            if any(p.poll() is not None for p in processes):
                return False
        return self.wait(ready, 0.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._executor.remove_node(self.node)
        self.node.destroy_node()


class Spinner(threading.Thread):
    """Spins a load client's node in its own thread; ``paused()`` holds it between two spins, so a
    robot can destroy its entities (rclpy refuses that while another thread waits on them).

    The pause is requested before the lock is taken, and the spinner does not take the lock again
    while a request is pending: a plain lock is not fair, and a thread that re-takes it
    microseconds after releasing it can starve a waiter indefinitely on a busy machine (the
    batching smoke hung so).
    """

    def __init__(self, node) -> None:
        super().__init__(name="spinner", daemon=True)
        from rclpy.executors import SingleThreadedExecutor

        self.executor = SingleThreadedExecutor()
        self.executor.add_node(node)
        self._lock = threading.Lock()
        self._pause_requests = 0
        self._requests_lock = threading.Lock()
        self._no_request = threading.Event()
        self._no_request.set()
        self.running = True

    def run(self) -> None:
        from rclpy._rclpy_pybind11 import InvalidHandle

        while self.running:
            self._no_request.wait(timeout=0.1)
            if not self._no_request.is_set():
                continue
            with self._lock:
                try:
                    self.executor.spin_once(timeout_sec=0.02)
                except InvalidHandle:
                    # The executor's pending wait still named an entity a closed robot destroyed;
                    # its next spin builds a fresh wait set.
                    continue

    @contextlib.contextmanager
    def paused(self):
        with self._requests_lock:
            self._pause_requests += 1
            self._no_request.clear()
        try:
            with self._lock:  # waits for the spin in progress (at most its 20 ms timeout)
                yield
        finally:
            with self._requests_lock:
                self._pause_requests -= 1
                if not self._pause_requests:
                    self._no_request.set()

    def stop(self) -> None:
        self.running = False
        self.join(timeout=5)
        self.executor.shutdown()


def counters(status) -> dict:
    """The cumulative counters of an ExecutorStatus, as a dict (for window deltas)."""
    fields = (
        "commands_published",
        "requests_sent",
        "chunks_merged",
        "chunks_dropped",
        "request_timeouts",
        "starvation_ticks",
        "fallback_ticks",
        "chunk_boundaries",
        "boundary_jump_mean",
        "boundary_jump_max",
        "action_step_mean",
        "last_delay_steps",
        "last_trimmed_rows",
        "latency_ms_p50",
        "latency_ms_p95",
        "request_threshold_s",
    )
    values = {name: getattr(status, name) for name in fields}
    values["rtc_active"] = bool(status.rtc_active)
    values["state_name"] = status.state_name
    values["t"] = time.monotonic()
    return values


def load_average() -> float:
    """The 1-minute load average: how busy the shared machine was (2 cores)."""
    return os.getloadavg()[0]


def torch_thread_env(threads: int) -> dict:
    """This process's environment with torch's intra-op threads fixed to ``threads`` for a child
    (0: torch's default)."""
    environment = dict(os.environ)
    if threads > 0:
        environment.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return environment
