"""Micro-batching: chunks/s and per-robot round trips, round-robin vs batched, in one run.

For each family (the default ACT, 96x128 camera, chunk 50; the tiny SmolVLA
with RTC on: every robot asks for RTC and sends the unexecuted prefix of its
previous chunk with its own delay) three policy_server_node processes run side
by side: ``max_batch_size`` 1 (plain round-robin), batching with
``max_batch_size`` 8 and ``batch_window_ms`` 0, and the same with a 5 ms
window. For each robot count the two
are measured back to back, so both see the same machine load.

Robots: many robots on 2 cores cannot each be a full executor process, so a
load client runs N sessions in ONE process, each through the product's
session client (``executor/session_client.py``: OpenSession with its data
plane matched, every chunk matched to its request), one thread per robot,
one request in flight each, and the next observation sent as soon as the
chunk arrives (closed loop, no think time): the server is always saturated,
so chunks/s is its capacity. Round trip = the robot's send -> its chunk
callback.

The ceiling: the bare model's ``predict_action_chunk`` at batch 1 and batch 8
through the server's own batched path (``PolicyRunner.infer``, per-request
noise and RTC inputs included), timed in this process in the same run; the
ratio of their throughputs is the most batching can give.

usage: python bench/batching.py [--seconds 8] [--counts 1 2 4 8 16] [--device cpu|cuda]
                                [--checkpoint FAMILY=PATH ...] [--smoke]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import common  # noqa: E402  (isolation first)
from common import median, percentile  # noqa: E402

import numpy as np  # noqa: E402

from lerobot_ros import images  # noqa: E402
from lerobot_ros.contract import OpenRequest  # noqa: E402
from lerobot_ros.data_plane import RequestId, observation_to_msg  # noqa: E402
from lerobot_ros.msg import Observation  # noqa: E402
from lerobot_ros.sim.default_policy import default_checkpoint  # noqa: E402
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, FRONT_CAMERA, SO101_JOINT_NAMES  # noqa: E402

TASK = "pick up the cube"
FPS = 30.0
HORIZON = 10
WINDOW_MS = 5.0
# (label, max_batch_size, batch_window_ms)
MODES = (("round-robin", 1, 0.0), ("batched", 8, 0.0), (f"batched, {WINDOW_MS:g} ms window", 8, WINDOW_MS))
CEILING_BATCH = 8
# family -> (RTC on, label)
FAMILIES = {"act": (False, "ACT"), "smolvla": (True, "tiny SmolVLA, RTC on")}


class LoadRobot(threading.Thread):
    """One robot of the load client: its own session, one request in flight, closed loop."""

    def __init__(self, node, namespace: str, client_id: str, index: int, rtc: bool, cameras) -> None:
        super().__init__(name=client_id, daemon=True)
        from lerobot_ros.executor.session_client import SessionClient

        self.client_id, self.rtc, self.delay = client_id, rtc, 1 + index % 4  # mixed delays across robots
        self.session = SessionClient(node, namespace, client_id)
        self.session.spinning = True  # the load client's executor thread spins the node
        grant = self.session.open_session(OpenRequest(
            client_id=client_id, schema_version=Observation.CURRENT_SCHEMA_VERSION, action_names=SO101_JOINT_NAMES,
            state_dim=len(SO101_JOINT_NAMES), camera_names=tuple(cameras), fps=FPS, task=TASK, rtc_requested=rtc,
        ), timeout_s=60.0)
        if isinstance(grant, str):
            raise RuntimeError(f"{client_id}: no session: {grant}")
        self.session_id = grant.session_id
        rng = np.random.default_rng(index)
        height, width = DEFAULT_IMAGE_SHAPE
        self.frames = {name: images.rgb_to_compressed(rng.integers(0, 256, (height, width, 3), np.uint8), 90)
                       for name in cameras}
        self.state = rng.uniform(-0.5, 0.5, len(SO101_JOINT_NAMES)).astype(np.float32)
        self.stop = threading.Event()
        self.answers: list[tuple[int, float, int]] = []  # (received_ns, round trip s, batch size)
        self.failures: list[str] = []

    def run(self) -> None:
        seq, previous = 0, None
        while not self.stop.is_set():
            seq += 1
            sent = time.monotonic_ns()
            request = RequestId(self.session_id, self.client_id, seq, 0, 0, sent)
            prefix_model = prefix_robot = None
            if self.rtc and previous is not None:  # the rows after the delay, as the executor would send them
                prefix_model = previous.actions_model[self.delay: self.delay + HORIZON]
                prefix_robot = previous.actions_robot[self.delay: self.delay + HORIZON]
            msg = observation_to_msg(request, TASK, self.state, self.frames, {},
                                     self.delay if self.rtc else 0, prefix_model, prefix_robot)
            answer = self.session.request_chunk(request, msg, timeout_s=60.0)
            if answer.chunk is None:
                self.failures.append(answer.refusal or "no chunk within 60 s")
                continue
            previous = answer.chunk
            self.answers.append((answer.received_ns, (answer.received_ns - sent) / 1e9, answer.chunk.batch_size))

    def close(self) -> None:
        self.stop.set()
        self.join(timeout=70)
        self.session.close_session(self.session_id, timeout_s=10.0)
        self.session.destroy()


def sweep_point(node, namespace: str, tag: str, count: int, rtc: bool, cameras, seconds: float, settle_s: float) -> dict:
    robots = [LoadRobot(node, namespace, f"{tag}_{count}_{index}", index, rtc, cameras) for index in range(count)]
    try:
        for robot in robots:
            robot.start()
        time.sleep(settle_s)
        started = time.monotonic_ns()
        time.sleep(seconds)
        ended = time.monotonic_ns()
    finally:
        for robot in robots:
            robot.close()
    rows = {robot.client_id: [a for a in robot.answers if started <= a[0] <= ended] for robot in robots}
    arrivals = sorted(a[0] for answers in rows.values() for a in answers)
    served = (len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9) if len(arrivals) >= 2 else float("nan")
    per_robot_p95 = [percentile([a[1] for a in answers], 0.95) for answers in rows.values() if answers]
    sizes = [a[2] for answers in rows.values() for a in answers]
    return {
        "count": count, "served": served, "chunks": len(arrivals),
        "p50": median([a[1] for answers in rows.values() for a in answers]),
        "p95_median": median(per_robot_p95), "p95_max": max(per_robot_p95, default=float("nan")),
        "batch_mean": sum(sizes) / len(sizes) if sizes else float("nan"),
        "failures": sum(len(robot.failures) for robot in robots),
    }


def bare_forward(checkpoint: Path, rtc: bool, device: str, repeats: int) -> dict:
    """Median seconds of one forward pass at batch 1 and at CEILING_BATCH, through PolicyRunner.infer."""
    import torch

    from lerobot_ros.data_plane import ObservationFrame
    from lerobot_ros.server.checkpoint import load_policy
    from lerobot_ros.server.inference import PolicyRunner

    runner = PolicyRunner(load_policy(str(checkpoint), device=device), rtc_enabled=rtc, rtc_execution_horizon=HORIZON,
                          noise_seed=0)
    rng = np.random.default_rng(0)
    prepared = []
    for index in range(CEILING_BATCH):
        prefix = rng.normal(size=(HORIZON, len(SO101_JOINT_NAMES))).astype(np.float32) if rtc else None
        frame = ObservationFrame(
            request=RequestId("bench", f"robot_{index}", 1, 0, 0, 0), schema_version=1, task=TASK,
            state=rng.uniform(-0.5, 0.5, len(SO101_JOINT_NAMES)).astype(np.float32),
            images={camera.name: rng.integers(0, 256, (camera.height, camera.width, 3), np.uint8)
                    for camera in runner.capabilities.cameras},
            inference_delay_steps=1 + index % 4, prefix_model=prefix, prefix_robot=prefix,
        )
        prepared.append(runner.prepare(frame, runner.new_session_processors(), TASK, rtc))
    timings = {}
    with torch.no_grad():
        for size in (1, CEILING_BATCH):
            for _ in range(2):
                runner.infer(prepared[:size])  # warm this shape up
            timings[size] = median([runner.infer(prepared[:size])[1] for _ in range(repeats)])
    return {"batch1_s": timings[1], "batchN_s": timings[CEILING_BATCH],
            "ratio": (CEILING_BATCH / timings[CEILING_BATCH]) / (1 / timings[1])}


def plot(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.6 * len(results)), squeeze=False)
    for (family, result), (left, right) in zip(results.items(), axes):
        label = FAMILIES[family][1] if family in FAMILIES else family
        for mode, *_ in MODES:
            rows = result["rows"][mode]
            counts = [r["count"] for r in rows]
            left.plot(counts, [r["served"] for r in rows], "o-", label=mode)
            right.plot(counts, [r["p95_median"] * 1000 for r in rows], "o-", label=f"{mode}: per-robot p95 (median)")
            right.plot(counts, [r["p95_max"] * 1000 for r in rows], "o:", label=f"{mode}: worst robot's p95")
        bare = result["bare"]
        left.axhline(CEILING_BATCH / bare["batchN_s"], color="k", ls="--", lw=1,
                     label=f"bare forward at batch {CEILING_BATCH} (ceiling)")
        left.axhline(1 / bare["batch1_s"], color="#7f7f7f", ls=":", lw=1, label="bare forward at batch 1")
        for axis in (left, right):
            axis.set_xscale("log", base=2)
            axis.set_xticks(counts, [str(c) for c in counts])
            axis.set_xlabel("robots on one server (closed loop)")
        left.set_ylabel("chunks served per second")
        left.set_title(f"{label}: capacity", fontsize=9)
        right.set_ylabel("round trip (ms)")
        right.set_title(f"{label}: per-robot p95 round trip", fontsize=9)
        left.legend(fontsize=7)
        right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: dict) -> list[str]:
    lines = ["| robots | mode | chunks/s | batched / round-robin | mean batch | round trip p50 | per-robot p95 (median / worst) | failures |",
             "|---|---|---|---|---|---|---|---|"]
    by_count = {mode: {r["count"]: r for r in result["rows"][mode]} for mode, *_ in MODES}
    for count in sorted(by_count["round-robin"]):
        for mode, *_ in MODES:
            r = by_count[mode][count]
            ratio = r["served"] / by_count["round-robin"][count]["served"]
            lines.append(f"| {count} | {mode} | {r['served']:.1f} | {ratio:.2f} | {r['batch_mean']:.2f} | {r['p50'] * 1000:.0f} ms "
                         f"| {r['p95_median'] * 1000:.0f} / {r['p95_max'] * 1000:.0f} ms | {r['failures']} |")
    return lines


def verdict(result: dict) -> str:
    by_count = {mode: {r["count"]: r for r in result["rows"][mode]} for mode, *_ in MODES}
    if 8 not in by_count["batched"]:
        return "(no 8-robot point in this run)"
    rr, ceiling = by_count["round-robin"][8], result["bare"]["ratio"]
    parts = [f"At 8 robots the bare model's ceiling (batch {CEILING_BATCH} vs 1) is **{ceiling:.2f}x**."]
    for mode, *_ in MODES[1:]:
        batched = by_count[mode][8]
        speedup = batched["served"] / rr["served"]
        met = speedup >= 1.5 and speedup >= 0.85 * ceiling and batched["p95_max"] <= rr["p95_max"]
        parts.append(f"{mode}: **{speedup:.2f}x** the chunks/s of round-robin ({100 * speedup / ceiling:.0f} % of the "
                     f"ceiling), worst per-robot p95 {batched['p95_max'] * 1000:.0f} ms vs {rr['p95_max'] * 1000:.0f} ms; "
                     f"goal (>= 1.5x, within 15 % of the ceiling, p95 no worse) **{'met' if met else 'missed'}**.")
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per point")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), help="act, smolvla, or names given in --checkpoint")
    parser.add_argument("--checkpoint", action="append", default=[], metavar="FAMILY=PATH",
                        help="serve this checkpoint for FAMILY (e.g. smolvla=/ckpt/smolvla_base, pi0=/ckpt/pi0); "
                             "RTC is asked for when the policy supports it")
    parser.add_argument("--device", default="cpu", help="server device: cpu, cuda, cuda:N")
    parser.add_argument("--repeats", type=int, default=10, help="bare forward timings per batch size")
    common.add_output_arguments(parser)
    args = parser.parse_args()
    document, plot_dir = common.outputs(args)
    if args.smoke:
        args.seconds, args.counts, args.repeats, args.families = 1.5, [1, 2], 2, ["act"]
    given = dict(item.split("=", 1) for item in args.checkpoint)
    load_before = common.load_average()

    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    rclpy.init()
    node = rclpy.create_node("bench_batching_load")
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for family in args.families:
                checkpoint = Path(given[family]) if family in given else default_checkpoint(family)
                rtc = FAMILIES.get(family, (True, family))[0]
                bare = bare_forward(checkpoint, rtc, args.device, args.repeats)
                print(f"{family}: bare forward {bare['batch1_s'] * 1000:.1f} ms at 1, "
                      f"{bare['batchN_s'] * 1000:.1f} ms at {CEILING_BATCH}: ceiling {bare['ratio']:.2f}x", flush=True)
                servers = {}
                try:
                    for index, (mode, size, window_ms) in enumerate(MODES):
                        name = f"bb_{family}_{index}"
                        servers[mode] = (name, common.start_server(tmp, name, {
                            "checkpoint": str(checkpoint), "device": args.device, "max_sessions": max(args.counts),
                            "max_batch_size": size, "batch_window_ms": window_ms, "rtc_enabled": rtc,
                            "rtc_execution_horizon": HORIZON, "default_task": TASK, "session_idle_timeout_s": 120.0,
                        }))
                    from lerobot_ros.server.checkpoint import load_policy  # the cameras the checkpoint wants

                    cameras = [c.name for c in load_policy(str(checkpoint), device="cpu").capabilities.cameras] \
                        if family in given else [FRONT_CAMERA]
                    rows = {mode: [] for mode, *_ in MODES}
                    for count in args.counts:
                        for mode, *_ in MODES:
                            name = servers[mode][0]
                            rows[mode].append(sweep_point(node, f"/{name}", name, count, rtc, cameras, args.seconds,
                                                          0.5 if args.smoke else 2.0))
                            print(f"{family} {mode} {count}: {rows[mode][-1]['served']:.1f} chunks/s, "
                                  f"mean batch {rows[mode][-1]['batch_mean']:.2f}", flush=True)
                finally:
                    common.stop_all([process for _, process in servers.values()])
                results[family] = {"bare": bare, "rows": rows}
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    load_after = common.load_average()

    png = plot_dir / "bench_batching.png"
    plot(results, png)
    sections = []
    for family, result in results.items():
        bare = result["bare"]
        label = FAMILIES[family][1] if family in FAMILIES else family
        sections.append(f"""**{label}** (device {args.device}). Bare forward through the server's batched path:
{bare['batch1_s'] * 1000:.1f} ms at batch 1, {bare['batchN_s'] * 1000:.1f} ms at batch {CEILING_BATCH}: ceiling
{bare['ratio']:.2f}x the throughput of batch 1.

{chr(10).join(table(result))}

{verdict(result)}
""")
    body = f"""
Three policy_server_node processes per family, side by side: `max_batch_size` 1 (round-robin), batching
with `max_batch_size` 8 and `batch_window_ms` 0, and the same with a {WINDOW_MS:g} ms window; each robot count is
measured on all three back to back.
Robots: a load client runs N sessions in ONE process through the product's session client
(`executor/session_client.py`), one thread and one request in flight per robot, the next observation
sent as soon as its chunk arrives (closed loop: the server is saturated, so chunks/s is its capacity;
a real robot asks every (chunk - buffer) / fps). With RTC every robot sends the unexecuted rows of its
previous chunk with its own delay (1-4 steps), so batches mix delays and prefixes. {args.seconds:g} s window
per point; round trip = send -> the robot's chunk callback. Load client, servers and the bare-forward
timing share this machine's cores; load average (1 min) {load_before:.1f} before, {load_after:.1f} after: the
machine was shared and noisy, so read ratios taken in this run, not absolute numbers.
{"No GPU was available in this session: the GPU run (ACT, SmolVLA at its real size, pi0) is ready as `bench/gpu_batching.sh`." if args.device == "cpu" else ""}

{chr(10).join(sections)}
![batching]({common.image_link(document, png)})
"""
    command = "python bench/batching.py" + (" --smoke" if args.smoke else
                                             f" --seconds {args.seconds:g} --counts {' '.join(map(str, args.counts))}"
                                             + (f" --device {args.device}" if args.device != "cpu" else ""))
    common.write_section("batching", command, body, document=document)


if __name__ == "__main__":
    main()
