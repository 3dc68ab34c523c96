"""Admission on threads or on processes: which one prepares more requests per second beside a busy
forward thread.

Issue 32 asks to measure the pipeline's admission pool as threads against
processes and to pick by the numbers. Admission is the server's stage 1:
decode the three JPEG cameras of one Observation (OpenCV releases the GIL),
check it, and run the session's LeRobot preprocessor (mostly Python: it
holds the GIL). Both variants here run exactly the product's code for that
(``observation_from_msg`` with the server's limits, then
``PolicyRunner.prepare`` with the session's own processors) on the
checkpoint the accelerator_capacity benchmark serves (ACT, three 224x224
cameras), fed the same pre-encoded Observation messages:

- threads: ``workers`` threads in the server's process, the shape the
  pipeline ships (lerobot_ros/server/requests/pipeline.py);
- processes: ``workers`` processes, each with its own runner and its own
  sessions (session affinity: a session's postprocessor reads state its
  preprocessor left, so a session never changes process). The parent hands
  each one the serialized message (as a raw subscription would receive it)
  and gets the prepared tensors back pickled through a pipe, because the
  forward thread in the parent needs them.

Beside either runs the parent's forward thread, modeled as in
bench/modeled_accelerator.py (GIL held for a share g of each forward; the
smolvla-gpu profile at a batch of 8: 67 ms), so threads compete with it for
the GIL while processes compete only for the cores. Reported per variant,
worker count and g: requests prepared per second (median of repeats), the
parent's CPU per request (what the forward thread's process pays), and the
modeled forward's stretch (its wall time over what the model asked: a
stretch over 1 means admission delayed the accelerator).

usage: python -m bench.admission_workers [--requests 200] [--workers 1 2] [--gils 0 0.5]
       [--repeats 3] [--smoke]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.accelerator_capacity import CAMERAS, POLICY_SIZE, act_checkpoint
from bench.modeled_accelerator import Curve, hold
from bench.paced_robots import TASK, encoded_cameras

FORWARD_BATCH = 8  # the modeled forward's batch: smolvla-gpu at 8 robots' requests, 67 ms


def observation_bytes(cameras: dict, count: int, state_dim: int) -> list[bytes]:
    """``count`` serialized Observation messages of distinct requests with the same frames."""
    import numpy as np
    from rclpy.serialization import serialize_message

    from lerobot_ros.protocol.wire.data_plane import (
        OutgoingObservation,
        RequestId,
        observation_to_msg,
    )

    state = np.zeros(state_dim, dtype=np.float32)
    return [
        serialize_message(
            observation_to_msg(
                OutgoingObservation(
                    RequestId(
                        session_id=f"s{i % 64}",
                        client_id=f"robot{i % 64}",
                        seq=i,
                        episode=0,
                        epoch=1,
                        sent_monotonic_ns=0,
                    ),
                    TASK,
                    state,
                    cameras,
                    {},
                    0,
                )
            )
        )
        for i in range(count)
    ]


class Admission:
    """The product's admission work for one process: decode + check + the session's
    preprocessing."""

    def __init__(self, checkpoint: str) -> None:
        from lerobot_ros.protocol.wire.data_plane.limits import RequestLimits
        from lerobot_ros.server.policy.checkpoint import load_policy
        from lerobot_ros.server.policy.inference import PolicyRunner
        from lerobot_ros.server.policy.model_threads import use_torch_threads

        use_torch_threads(1)
        self.runner = PolicyRunner(load_policy(checkpoint, device="cpu"))
        self.limits = RequestLimits()
        self.processors: dict[str, object] = {}

    def prepare(self, data: bytes):
        from rclpy.serialization import deserialize_message

        from lerobot_ros.msg import Observation
        from lerobot_ros.protocol.wire.data_plane import observation_from_msg

        capabilities = self.runner.capabilities
        frame = observation_from_msg(
            deserialize_message(data, Observation),
            len(capabilities.action_names),
            self.limits,
            capabilities.camera_sizes,
        )
        session = frame.request.session_id
        if session not in self.processors:
            self.processors[session] = self.runner.new_session_processors()
        return self.runner.prepare(frame, self.processors[session], frame.task, False)


def _process_worker(checkpoint: str, connection) -> None:
    admission = Admission(checkpoint)
    connection.send("ready")
    while (data := connection.recv()) is not None:
        prepared = admission.prepare(data)
        connection.send(
            {key: value for key, value in prepared.batch.items() if hasattr(value, "numpy")}
        )


class ForwardThread:
    """The parent's modeled forward, back to back, until stopped; records how much each one
    overran."""

    def __init__(self, gil: float) -> None:
        self.curve = Curve.of("smolvla-gpu", gil)
        self.stretches: list[float] = []
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asked = self.curve.seconds(FORWARD_BATCH)
        while not self.stopping.is_set():
            started = time.perf_counter()
            hold(asked, self.curve.gil)
            self.stretches.append((time.perf_counter() - started) / asked)

    def __enter__(self) -> ForwardThread:
        self.thread.start()
        return self

    def __exit__(self, *_) -> None:
        self.stopping.set()
        self.thread.join()


def run_threads(admission: Admission, messages: list[bytes], workers: int) -> float:
    """Seconds to prepare every message on ``workers`` threads, each owning a disjoint set of
    sessions."""
    shards = [messages[index::workers] for index in range(workers)]

    def work(shard: list[bytes]) -> None:
        for data in shard:
            admission.prepare(data)

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(work, shards))
    return time.perf_counter() - started


class ProcessPool:
    """``workers`` admission processes with session affinity (a session's requests always go to one
    process)."""

    def __init__(self, checkpoint: str, workers: int) -> None:
        # rclpy and torch do not survive a fork cleanly
        context = multiprocessing.get_context("spawn")
        self.connections, self.processes = [], []
        for _ in range(workers):
            parent, child = context.Pipe()
            process = context.Process(
                target=_process_worker, args=(checkpoint, child), daemon=True
            )
            process.start()
            self.connections.append(parent)
            self.processes.append(process)
        for connection in self.connections:
            if not connection.poll(300) or connection.recv() != "ready":
                raise RuntimeError("an admission process did not load the checkpoint within 300 s")

    def run(self, messages: list[bytes]) -> float:
        """Seconds to prepare every message; one feeding thread per process keeps one request in
        flight there."""
        workers = len(self.connections)

        def feed(index: int) -> None:
            connection = self.connections[index]
            for data in messages[index::workers]:
                connection.send(data)
                # the prepared tensors, unpickled in this (the forward's) process
                connection.recv()

        started = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(feed, range(workers)))
        return time.perf_counter() - started

    def close(self) -> None:
        for connection in self.connections:
            connection.send(None)
        for process in self.processes:
            process.join(timeout=10)


def measure(
    variant: str, workers: int, gil: float, messages: list[bytes], repeats: int, admission, pool
) -> dict:
    rates, cpu_ms, stretches = [], [], []
    for _ in range(repeats):
        cpu_before = time.process_time()
        with ForwardThread(gil) as forward:
            seconds = (
                run_threads(admission, messages, workers)
                if variant == "threads"
                else pool.run(messages)
            )
        cpu_after = time.process_time()
        rates.append(len(messages) / seconds)
        cpu_ms.append(1000 * (cpu_after - cpu_before) / len(messages))
        stretches.append(
            statistics.median(forward.stretches) if forward.stretches else float("nan")
        )
    return {
        "variant": variant,
        "workers": workers,
        "gil": gil,
        "rate": statistics.median(rates),
        "rates": rates,
        "parent_cpu_ms": statistics.median(cpu_ms),
        "stretch": statistics.median(stretches),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| admission on | workers | forward's GIL share g | requests prepared/s (median of "
        "repeats) | "
        "forward process CPU per request | modeled forward's stretch (median) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['variant']} | {row['workers']} | {row['gil']:g} | **{row['rate']:.0f}** "
            f"({', '.join(f'{r:.0f}' for r in row['rates'])}) | {row['parent_cpu_ms']:.1f} ms "
            f"| {row['stretch']:.2f}x |"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> None:
    """Requests prepared per second, threads (blue) against processes (orange), per worker count
    and g."""
    import matplotlib.pyplot as plt  # the Agg backend: set by common

    labels = [f"{row['variant']}\nx{row['workers']}, g={row['gil']:g}" for row in rows]
    figure, axis = plt.subplots(figsize=(max(5.0, 1.1 * len(rows)), 3.2))
    axis.bar(
        labels,
        [row["rate"] for row in rows],
        color=["#1f77b4" if row["variant"] == "threads" else "#ff7f0e" for row in rows],
    )
    axis.set_ylabel("requests prepared / s")
    axis.tick_params(axis="x", labelsize=7)
    axis.set_title(
        "Admission beside a modeled forward: threads (blue) or processes (orange)", fontsize=9
    )
    figure.tight_layout()
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=200, help="requests prepared per measurement"
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--gils", type=float, nargs="+", default=[0.0, 0.5])
    parser.add_argument("--repeats", type=int, default=3)
    common.add_output_arguments(parser)
    args = parser.parse_args()
    if args.smoke:
        args.requests, args.workers, args.gils, args.repeats = 10, [1], [0.5], 1
    document, plot_dir = common.outputs(args)
    checkpoint = str(act_checkpoint())
    admission = Admission(checkpoint)
    cameras = encoded_cameras(CAMERAS, policy_size=POLICY_SIZE)
    messages = observation_bytes(
        cameras, args.requests, len(admission.runner.capabilities.action_names)
    )
    for data in messages[:5]:  # warm the processors' first calls
        admission.prepare(data)
    rows = []
    for workers in args.workers:
        pool = ProcessPool(checkpoint, workers)
        try:
            pool.run(messages[:5] * workers)
            for gil in args.gils:
                for variant in ("threads", "processes"):
                    row = measure(variant, workers, gil, messages, args.repeats, admission, pool)
                    rows.append(row)
                    print(
                        f"{variant} x{workers} g={gil:g}: {row['rate']:.0f} requests/s, parent "
                        f"{row['parent_cpu_ms']:.1f} ms CPU/request, forward stretch "
                        f"{row['stretch']:.2f}x",
                        flush=True,
                    )
        finally:
            pool.close()
    plot_path = plot_dir / "bench_admission_workers.png"
    plot(rows, plot_path)
    body = "\n".join(
        [
            f"Admission of {args.requests} requests (three 224x224 JPEG cameras each, ACT's "
            "preprocessor, 64 sessions) on "
            f"this machine's {os.cpu_count()} cores, beside the parent's modeled forward "
            f"({Curve.of('smolvla-gpu', 0).describe()}, back to back at a batch of "
            f"{FORWARD_BATCH}); "
            f"{args.repeats} repeats per row. Processes: one per worker, each with its own runner "
            "and sessions; the "
            "parent sends the serialized message and unpickles the prepared tensors (float32, "
            "about 1.8 MB a request).",
            "",
            table(rows),
            "",
            f"![admission on threads or processes]({common.image_link(document, plot_path)})",
        ]
    )
    common.write_section(
        "admission_workers",
        "python -m bench.admission_workers"
        + (" --smoke" if args.smoke else f" --requests {args.requests} --repeats {args.repeats}"),
        body,
        document,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
