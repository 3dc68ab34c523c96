"""Micro-batching: chunks/s and per-robot round trips, round-robin vs batched, in one run.

For each family (the default ACT, 96x128 camera, chunk 50; the tiny SmolVLA with RTC on: every
robot asks for RTC and sends the unexecuted prefix of its previous chunk with its own delay) three
policy_server_node processes run side by side: ``max_batch_size`` 1 (plain round-robin), batching
with ``max_batch_size`` 8 and ``batch_window_ms`` 0, and the same with a 5 ms window. For each
robot count the two are measured back to back, so both see the same machine load.

Robots: many robots on 2 cores cannot each be a full executor process, so a
load client runs N sessions in ONE process, each a scripted robot on the
executor's own request path (bench/scripted_robot.py: the product's session
client, OpenSession with its data plane matched, every chunk matched to its
request; each request a ``PendingRequest``, with RTC its prefix cut from the
executor's ``ActionQueue``), one thread per robot,
one request in flight each, and the next observation sent as soon as the
chunk arrives (closed loop, no think time): the server is always saturated,
so chunks/s is its capacity. Round trip = the robot's send -> its chunk
callback.

The ceiling: the bare model's ``predict_action_chunk`` at batch 1 and batch 8
(``--max-batch-size``) through the server's own batched path (``PolicyRunner.infer``, per-request
noise and RTC inputs included), timed in this process in the same run; the ratio of their
throughputs is the most batching can give.

usage: python -m bench.batching [--seconds 8] [--counts 1 2 4 8 16] [--device cpu|cuda]
       [--families act smolvla smolvla_real ...] [--checkpoint FAMILY=PATH ...] [--smoke]
On a GPU machine: bench/gpu_batching.sh.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.common import Spinner, median, percentile
from bench.scripted_robot import ScriptedRobot
from lerobot_ros.protocol.contract import SCHEMA_VERSION
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import RequestId
from lerobot_ros.sim.default_policy import default_checkpoint
from lerobot_ros.sim.so101 import DEFAULT_IMAGE_SHAPE, SO101_JOINT_NAMES

TASK = "pick up the cube"
FPS = 30.0
HORIZON = 10
WINDOW_MS = 5.0


def modes(max_batch: int) -> tuple:
    """(label, max_batch_size, batch_window_ms) of the servers compared; the first is the
    baseline."""
    return (
        ("round-robin", 1, 0.0),
        ("batched", max_batch, 0.0),
        (f"batched, {WINDOW_MS:g} ms window", max_batch, WINDOW_MS),
    )


# family -> (RTC on, label)
FAMILIES = {
    "act": (False, "ACT"),
    "smolvla": (True, "tiny SmolVLA, RTC on"),
    "smolvla_real": (True, "SmolVLA at its real size (random weights), RTC on"),
}


def build_real_size_smolvla(directory: Path) -> Path:
    """SmolVLA with SmolVLM2-500M's shapes (16 of its 32 text layers, as SmolVLA uses), random
    weights, no download.

    The tiny checkpoint's tokenizer and processors are kept (random weights do not
    care which tokens arrive); only the VLM config and the policy's weights change.
    """
    import torch
    from lerobot.configs.policies import PreTrainedConfig
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy
    from transformers import AutoConfig

    from lerobot_ros.sim.default_policy import VLM_DIR, build_smolvla_checkpoint

    directory = build_smolvla_checkpoint(Path(directory))
    vlm = AutoConfig.from_pretrained(directory / VLM_DIR)
    vlm.text_config.update(
        {
            "hidden_size": 960,
            "intermediate_size": 2560,
            "num_hidden_layers": 32,
            "num_attention_heads": 15,
            "num_key_value_heads": 5,
            "head_dim": 64,
        }
    )
    vlm.vision_config.update(
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "patch_size": 16,
        }
    )
    vlm.save_pretrained(directory / VLM_DIR)
    config = PreTrainedConfig.from_pretrained(directory)
    config.vlm_model_name, config.num_vlm_layers = str(directory / VLM_DIR), 16
    torch.manual_seed(0)
    SmolVLAPolicy(config).save_pretrained(directory)
    return directory


class LoadRobot:
    """One robot of the load client: a ``ScriptedRobot`` with its own session, one request in
    flight, closed loop (or one request per ``period_s``).

    With RTC it keeps the executor's replace-mode queue: each answer is merged into it, and before
    each request the robot plays its RTC delay's rows (mixed delays across robots), so the prefix
    sent is the rows of the previous chunk after that delay, cut by the executor's own snapshot.
    """

    def __init__(
        self,
        node,
        namespace: str,
        client_id: str,
        index: int,
        rtc: bool,
        cameras,
        period_s: float = 0.0,
    ) -> None:
        self.client_id, self.period_s = client_id, period_s
        delay = 1 + index % 4  # mixed delays across robots
        rng = np.random.default_rng(index)
        height, width = DEFAULT_IMAGE_SHAPE
        frames = {
            name: images.rgb_to_compressed(rng.integers(0, 256, (height, width, 3), np.uint8), 90)
            for name in cameras
        }
        self.robot = ScriptedRobot(
            node,
            namespace,
            client_id,
            state=rng.uniform(-0.5, 0.5, len(SO101_JOINT_NAMES)).astype(np.float32),
            cameras=frames,  # encoded once, forwarded untouched: the load client stays cheap
            fps=FPS,
            task=TASK,
            rtc=rtc,
            delay_steps=delay,
            resize_to_policy=False,
            plays=lambda queued: delay,
            spinning=True,  # the load client's executor thread spins the node
            request_timeout_s=60.0,
        )
        self.robot.open(attempts=3)
        if not self.robot.requests.rtc:
            # without RTC granted nothing of the queue is sent: no merge for the load client to pay
            self.robot.requests.queue = None
        # (received_ns, round trip s, batch size)
        self.answers: list[tuple[int, float, int]] = []
        self.failures = self.robot.failures

    def _answered(self, exchange) -> None:
        self.answers.append(
            (exchange.received_ns, exchange.round_trip_s, exchange.chunk.batch_size)
        )

    def start(self) -> None:
        self.robot.start(self.period_s, on_exchange=self._answered)

    def close(self, spinner: Spinner) -> None:
        self.robot.close(timeout_s=10.0, paused=spinner.paused)


def sweep_point(
    node,
    spinner: Spinner,
    namespace: str,
    tag: str,
    count: int,
    rtc: bool,
    cameras,
    seconds: float,
    settle_s: float,
    period_s: float,
) -> dict:
    robots = [
        LoadRobot(node, namespace, f"{tag}_{count}_{index}", index, rtc, cameras, period_s)
        for index in range(count)
    ]
    try:
        for robot in robots:
            robot.start()
        time.sleep(settle_s)
        started = time.monotonic_ns()
        time.sleep(seconds)
        ended = time.monotonic_ns()
    finally:
        for robot in robots:
            robot.close(spinner)
    rows = {
        robot.client_id: [a for a in robot.answers if started <= a[0] <= ended] for robot in robots
    }
    arrivals = sorted(a[0] for answers in rows.values() for a in answers)
    served = (
        (len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9)
        if len(arrivals) >= 2
        else float("nan")
    )
    per_robot_p95 = [
        percentile([a[1] for a in answers], 0.95) for answers in rows.values() if answers
    ]
    sizes = [a[2] for answers in rows.values() for a in answers]
    return {
        "count": count,
        "served": served,
        "chunks": len(arrivals),
        "p50": median([a[1] for answers in rows.values() for a in answers]),
        "p95_median": median(per_robot_p95),
        "p95_max": max(per_robot_p95, default=float("nan")),
        "batch_mean": sum(sizes) / len(sizes) if sizes else float("nan"),
        "failures": sum(len(robot.failures) for robot in robots),
    }


def bare_forward(checkpoint: Path, rtc: bool, device: str, repeats: int, batch: int) -> dict:
    """Median seconds of one forward pass at batch 1 and at ``batch``, through PolicyRunner.infer;
    the cameras."""
    import torch

    from lerobot_ros.protocol.wire.data_plane import ObservationFrame
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner

    runner = PolicyRunner(
        load_policy(str(checkpoint), device=device),
        rtc_enabled=rtc,
        rtc_execution_horizon=HORIZON,
        noise_seed=0,
    )
    rng = np.random.default_rng(0)
    prepared = []
    for index in range(batch):
        prefix = (
            rng.normal(size=(HORIZON, len(SO101_JOINT_NAMES))).astype(np.float32) if rtc else None
        )
        frame = ObservationFrame(
            request=RequestId("bench", f"robot_{index}", 1, 0, 0, 0),
            schema_version=SCHEMA_VERSION,
            task=TASK,
            state=rng.uniform(-0.5, 0.5, len(SO101_JOINT_NAMES)).astype(np.float32),
            images={
                camera.name: rng.integers(0, 256, (camera.height, camera.width, 3), np.uint8)
                for camera in runner.capabilities.cameras
            },
            inference_delay_steps=1 + index % 4,
            prefix_model=prefix,
            prefix_robot=prefix,
        )
        prepared.append(runner.prepare(frame, runner.new_session_processors(), TASK, rtc))
    timings = {}
    with torch.no_grad():
        for size in (1, batch):
            for _ in range(2):
                runner.infer(prepared[:size])  # warm this shape up
            timings[size] = median([runner.infer(prepared[:size])[1] for _ in range(repeats)])
    return {
        "batch1_s": timings[1],
        "batchN_s": timings[batch],
        "batch": batch,
        "ratio": (batch / timings[batch]) / (1 / timings[1]),
        "cameras": [camera.name for camera in runner.capabilities.cameras],
    }


def plot(results: dict, path: Path, compared) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.6 * len(results)), squeeze=False)
    for (family, result), (left, right) in zip(results.items(), axes, strict=False):
        label = FAMILIES[family][1] if family in FAMILIES else family
        for mode, *_ in compared:
            rows = result["rows"][mode]
            counts = [r["count"] for r in rows]
            left.plot(counts, [r["served"] for r in rows], "o-", label=mode)
            right.plot(
                counts,
                [r["p95_median"] * 1000 for r in rows],
                "o-",
                label=f"{mode}: per-robot p95 (median)",
            )
            right.plot(
                counts,
                [r["p95_max"] * 1000 for r in rows],
                "o:",
                label=f"{mode}: worst robot's p95",
            )
        bare = result["bare"]
        left.axhline(
            bare["batch"] / bare["batchN_s"],
            color="k",
            ls="--",
            lw=1,
            label=f"bare forward at batch {bare['batch']} (ceiling)",
        )
        left.axhline(
            1 / bare["batch1_s"], color="#7f7f7f", ls=":", lw=1, label="bare forward at batch 1"
        )
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


def table(result: dict, compared) -> list[str]:
    lines = [
        "| robots | mode | chunks/s | batched / round-robin | mean batch | round trip p50 | "
        "per-robot p95 (median / worst) | failures |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_count = {mode: {r["count"]: r for r in result["rows"][mode]} for mode, *_ in compared}
    for count in sorted(by_count["round-robin"]):
        for mode, *_ in compared:
            r = by_count[mode][count]
            ratio = r["served"] / by_count["round-robin"][count]["served"]
            lines.append(
                f"| {count} | {mode} | {r['served']:.1f} | {ratio:.2f} | {r['batch_mean']:.2f} | "
                f"{r['p50'] * 1000:.0f} ms "
                f"| {r['p95_median'] * 1000:.0f} / {r['p95_max'] * 1000:.0f} ms | {r['failures']} "
                "|"
            )
    return lines


def verdict(result: dict, compared, device: str) -> str:
    by_count = {mode: {r["count"]: r for r in result["rows"][mode]} for mode, *_ in compared}
    if 8 not in by_count["batched"]:
        return "(no 8-robot point in this run)"
    rr, ceiling = by_count["round-robin"][8], result["bare"]["ratio"]
    parts = [
        f"At 8 robots the bare model's ceiling (batch {result['bare']['batch']} vs 1) is "
        f"**{ceiling:.2f}x**."
    ]
    for mode, *_ in compared[1:]:
        batched = by_count[mode][8]
        speedup = batched["served"] / rr["served"]
        met = speedup >= 1.5 and speedup >= 0.85 * ceiling and batched["p95_max"] <= rr["p95_max"]
        parts.append(
            f"{mode}: **{speedup:.2f}x** the chunks/s of round-robin "
            f"({100 * speedup / ceiling:.0f} % of the "
            f"ceiling), worst per-robot p95 {batched['p95_max'] * 1000:.0f} ms vs "
            f"{rr['p95_max'] * 1000:.0f} ms; "
            "goal (>= 1.5x, within 15 % of the ceiling, p95 no worse) "
            f"**{'met' if met else 'missed'}**."
        )
    # the GPU goals: >= 4x at 8 robots, p95 <= 2x the single robot's; robots within 200 ms
    if device != "cpu":
        single = by_count["round-robin"][min(by_count["round-robin"])]["p95_max"]
        for mode, *_ in compared[1:]:
            within = [
                c
                for c, r in sorted(by_count[mode].items())
                if r["p95_max"] <= 0.2 and not r["failures"]
            ]
            parts.append(
                f"{mode}: p95 at 8 robots {by_count[mode][8]['p95_max'] / single:.1f}x the single "
                "robot's; "
                f"most robots with every p95 <= 200 ms: {max(within, default=0)}."
            )
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=8.0, help="measurement window per point")
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument(
        "--families",
        nargs="+",
        default=["act", "smolvla"],
        help="act, smolvla, smolvla_real (built here), or names given in --checkpoint",
    )
    parser.add_argument(
        "--checkpoint",
        action="append",
        default=[],
        metavar="FAMILY=PATH",
        help="serve this checkpoint for FAMILY (e.g. smolvla=/ckpt/smolvla_base, pi0=/ckpt/pi0); "
        "RTC is asked for when the policy supports it",
    )
    parser.add_argument("--device", default="cpu", help="server device: cpu, cuda, cuda:N")
    parser.add_argument(
        "--repeats", type=int, default=10, help="bare forward timings per batch size"
    )
    parser.add_argument(
        "--torch-threads",
        type=int,
        default=0,
        help="intra-op threads of every torch process in the run (servers and the bare forward); "
        "0: torch's default. On an oversubscribed CPU, 1 avoids OpenMP spin-waits",
    )
    parser.add_argument(
        "--max-batch-size",
        type=int,
        default=8,
        help="max_batch_size of the batched servers (and the ceiling's batch)",
    )
    parser.add_argument(
        "--request-period-s",
        type=float,
        default=0.0,
        help="0: closed loop (saturating); > 0: each robot asks once per period, as a paced robot "
        "does",
    )
    common.add_output_arguments(parser)
    args = parser.parse_args()
    document, plot_dir = common.outputs(args)
    if args.smoke:
        args.seconds, args.counts, args.repeats, args.families = 1.0, [1, 2], 1, ["act"]
    given = dict(item.split("=", 1) for item in args.checkpoint)
    # The smoke compares the baseline with one batched server: the window's server runs the same
    # code.
    compared = modes(args.max_batch_size)[:2] if args.smoke else modes(args.max_batch_size)
    if args.torch_threads:
        import torch

        # the servers this run spawns inherit it
        os.environ["OMP_NUM_THREADS"] = str(args.torch_threads)
        torch.set_num_threads(args.torch_threads)
    load_before = common.load_average()

    import rclpy

    rclpy.init()
    node = rclpy.create_node("bench_batching_load")
    spinner = Spinner(node)
    spinner.start()
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            for family in args.families:
                if family in given:
                    checkpoint = Path(given[family])
                elif family == "smolvla_real":
                    checkpoint = build_real_size_smolvla(tmp / "smolvla_real")
                else:
                    checkpoint = default_checkpoint(family)
                rtc = FAMILIES.get(family, (True, family))[0]
                bare = bare_forward(
                    checkpoint, rtc, args.device, args.repeats, args.max_batch_size
                )
                print(
                    f"{family}: bare forward {bare['batch1_s'] * 1000:.1f} ms at 1, "
                    f"{bare['batchN_s'] * 1000:.1f} ms at {bare['batch']}: ceiling "
                    f"{bare['ratio']:.2f}x",
                    flush=True,
                )
                servers = {}
                try:
                    for index, (mode, size, window_ms) in enumerate(compared):
                        name = f"bb_{family}_{index}"
                        servers[mode] = (
                            name,
                            common.start_server(
                                tmp,
                                name,
                                {
                                    "checkpoint": str(checkpoint),
                                    "device": args.device,
                                    "max_sessions": max(args.counts),
                                    "max_batch_size": size,
                                    "batch_window_ms": window_ms,
                                    "rtc_enabled": rtc,
                                    "rtc_execution_horizon": HORIZON,
                                    "default_task": TASK,
                                    "session_idle_timeout_s": 120.0,
                                },
                            ),
                        )
                    rows = {mode: [] for mode, *_ in compared}
                    for count in args.counts:
                        for mode, *_ in compared:
                            name = servers[mode][0]
                            rows[mode].append(
                                sweep_point(
                                    node,
                                    spinner,
                                    f"/{name}",
                                    name,
                                    count,
                                    rtc,
                                    bare["cameras"],
                                    args.seconds,
                                    0.5 if args.smoke else 2.0,
                                    args.request_period_s,
                                )
                            )
                            print(
                                f"{family} {mode} {count}: {rows[mode][-1]['served']:.1f} "
                                "chunks/s, "
                                f"mean batch {rows[mode][-1]['batch_mean']:.2f}",
                                flush=True,
                            )
                finally:
                    common.stop_all([process for _, process in servers.values()])
                results[family] = {"bare": bare, "rows": rows}
    finally:
        spinner.stop()
        node.destroy_node()
        rclpy.try_shutdown()
    load_after = common.load_average()

    png = plot_dir / "bench_batching.png"
    plot(results, png, compared)
    sections = []
    for family, result in results.items():
        bare = result["bare"]
        label = FAMILIES[family][1] if family in FAMILIES else family
        heading = f"**{label}** (device {args.device})."
        sections.append(f"""{heading} Bare forward through the server's batched path:
{bare["batch1_s"] * 1000:.1f} ms at batch 1, {bare["batchN_s"] * 1000:.1f} ms at batch
{bare["batch"]}: ceiling
{bare["ratio"]:.2f}x the throughput of batch 1.

{chr(10).join(table(result, compared))}

{verdict(result, compared, args.device)}
""")
    pacing = (
        "sent as soon as its chunk arrives (closed loop: the server is saturated, so chunks/s is"
        " its capacity; a real robot asks every (chunk - buffer) / fps)."
        if not args.request_period_s
        else f"sent once every {args.request_period_s:g} s (a paced robot)."
    )
    threads_note = (
        f", torch with {args.torch_threads} intra-op thread(s) in every process"
        if args.torch_threads
        else ""
    )
    no_gpu = (
        "No GPU was available in this session: the GPU run (ACT, SmolVLA at its real size, pi0)"
        " is ready as `bench/gpu_batching.sh`."
        if args.device == "cpu"
        else ""
    )
    body = f"""
Three policy_server_node processes per family, side by side: `max_batch_size` 1 (round-robin),
batching
with `max_batch_size` {args.max_batch_size} and `batch_window_ms` 0, and the same with a
{WINDOW_MS:g} ms window; each robot count is
measured on all three back to back.
Robots: a load client runs N sessions in ONE process through the product's session client
(`executor/session_client.py`), one thread and one request in flight per robot, the next
observation
{pacing} With RTC every robot sends the unexecuted rows of its
previous chunk with its own delay (1-4 steps), so batches mix delays and prefixes. {args.seconds:g}
s window
per point; round trip = send -> the robot's chunk callback. Load client, servers and the
bare-forward
timing share this machine's
cores{threads_note}; load average (1 min) {load_before:.1f} before, {load_after:.1f} after: the
machine was shared and noisy, so read ratios taken in this run, not absolute numbers.
{no_gpu}

{chr(10).join(sections)}
![batching]({common.image_link(document, png)})
"""
    command = "python -m bench.batching" + (
        " --smoke"
        if args.smoke
        else f" --seconds {args.seconds:g} --counts {' '.join(map(str, args.counts))}"
        + (f" --torch-threads {args.torch_threads}" if args.torch_threads else "")
        + (f" --device {args.device}" if args.device != "cpu" else "")
    )
    common.write_section("batching", command, body, document=document)


if __name__ == "__main__":
    main()
