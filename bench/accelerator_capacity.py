"""Robots per accelerator: how many real-rate robots one server holds within a latency budget
(MODELED accelerator).

The reason to run this server is that one accelerator drives many robots
(issue 32). No GPU is in the room, so the server's forward is a model
(bench/modeled_accelerator.py: t(b) = t0 + k*b of wall time, holding the GIL
for a share g of it; profiles ``act-gpu``, ``smolvla-gpu``, ``pi05-gpu``),
while everything else is the product's own process over the real ROS data
plane: decoding, the checkpoint's LeRobot pre- and postprocessors, signing,
publishing, auditing. So what is measured is the host path around an
accelerator of known speed; every number here is labelled "modeled
accelerator".

Served: an ACT checkpoint built here with LeRobot (random weights: the
modeled forward never runs them), three 224x224 cameras, state and action
dim 6, chunk 50. Robots: bench/paced_robots.py, N sessions in ONE load-client
process through the product's session client, each at a real robot's rate
(30 Hz, chunk 50, the executor's trigger with its own windowed p95, replace
mode), sending three 480x640 frames shrunk to 224x224 and JPEG-encoded as the
executor does by default (encoded once). Each point runs N robots for a
settle time, then a window; per point: every robot's p95 round trip (send ->
its chunk callback), chunks/s, the modeled accelerator's busy fraction (the
server's audit log: sum of inference_ms / batch_size over the window), host
CPU per request (the server process's CPU seconds / requests audited), the
load client's CPU per request, mean batch (requests / forwards), starved
control steps, failures, and the CPU used outside the benchmark in that
window (bench/outside_load.py; a point over 0.3 cores is marked disturbed).

Modes: today's serial path and the pipeline (server parameter ``pipeline``),
measured back to back at each N, each on its own server process; when the
server has no ``pipeline`` parameter yet, serial only. N grows geometrically
from 1 until every robot's p95 breaks the largest budget, then the largest N
within each budget is narrowed by bisection.

The bound it is compared with, N* = min(N*_acc, N*_host):
  r(p)    = fps / (L - floor(fps * theta(p))), theta(p) = max(buffer_time_s, min(margin * p +
  1/fps, L/fps))
            the request rate of a robot whose p95 is p (bench/paced_robots.py)
  N*_acc  = b* / (r(B) * t(b*)), b* the largest mean batch whose p95 batch b* + 1.645 sqrt(b*)
  stays
            within min(max_batch_size, (B/2 - t0) / k)
            at full load the forward runs back to back and each takes what arrived during the
            previous one,
            b = N r t(b) on average, Poisson around it; a p95 request waits out a forward under
            way, then
            rides the next, both at the tail batch, so its round trip is about 2 t(b95) (host time
            aside):
            within budget B while t(b95) <= B/2 (the server's capacity model,
            lerobot_ros/server/sessions/capacity_model.py,
            predicts the same way); N*_acc(mean), with b95 = b, is the bound for a typical request
  N*_host = cores / (c * r(B)), c = the server's host CPU seconds per request (at the largest N
  within B)

usage: python -m bench.accelerator_capacity [--profiles act-gpu smolvla-gpu pi05-gpu]
       [--gils 0 0.5] [--modes serial pipeline] [--seconds 20] [--settle-s 4] [--max-robots 256]
       [--growth 1.5] [--counts N ...] [--tolerance 0.1] [--max-batch-size 64] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

from bench import (
    common,  # first: it isolates the ROS graph and keeps the Hub offline
    outside_load,
)
from bench.common import Spinner, median, percentile
from bench.modeled_accelerator import ENVIRONMENT, PROFILES, Curve
from bench.paced_robots import (
    BUFFER_S,
    CHUNK,
    FPS,
    MARGIN,
    TASK,
    Fleet,
    encoded_cameras,
    request_rate,
)
from lerobot_ros.server.sessions.capacity_model import TAIL_Z
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES

CAMERAS = tuple(f"observation.images.cam{index}" for index in range(3))
POLICY_SIZE = (224, 224)
FRAME_SHAPE = (480, 640)
BUDGETS_S = (0.2, 0.4)
CHECKPOINT_NAME = "act_3cam224_random_v1"  # bump when the checkpoint below changes


def act_checkpoint() -> Path:
    """ACT, three 224x224 cameras, 6 joints, chunk 50, random weights; built with LeRobot once and
    cached."""
    from lerobot_ros.sim.default_policy import build_act_checkpoint, cache_dir

    target = cache_dir() / "policies" / CHECKPOINT_NAME
    if (target / "lerobot_ros.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{CHECKPOINT_NAME}-", dir=target.parent))
    # built beside the target and renamed: an interrupted build never leaves a half-written
    # checkpoint
    try:
        build_act_checkpoint(
            staging, cameras={name: POLICY_SIZE for name in CAMERAS}, chunk_size=CHUNK, fps=FPS
        )
        staging.rename(target)
    except OSError:
        if not (target / "lerobot_ros.json").is_file():
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def server_has(parameter: str) -> bool:
    from lerobot_ros.server.settings import PARAMETERS

    return any(entry.name == parameter for entry in PARAMETERS)


def modes(requested) -> dict[str, dict]:
    """label -> the server parameters that select it; without a ``pipeline`` parameter only today's
    serial path."""
    if not server_has("pipeline"):
        return {"serial": {}} if "serial" in requested else {}
    return {
        mode: {"pipeline": mode == "pipeline"}
        for mode in ("serial", "pipeline")
        if mode in requested
    }


def start_servers(
    directory: Path,
    curve: Curve,
    checkpoint: Path,
    chosen: dict,
    max_batch: int,
    max_sessions: int,
    tag: str = "",
) -> dict:
    """One modeled-accelerator server per mode, started side by side; mode -> (name, process, audit
    path)."""
    from lerobot_ros.processes import spawn_node, stop

    environment = {
        ENVIRONMENT["profile"]: curve.name,
        ENVIRONMENT["gil"]: str(curve.gil),
        ENVIRONMENT["t0_ms"]: str(curve.t0_s * 1000),
        ENVIRONMENT["k_ms"]: str(curve.k_s * 1000),
    }
    servers = {}
    try:
        for mode, extra in chosen.items():
            name = f"acc_{curve.name.replace('-', '_')}_g{round(100 * curve.gil)}_{mode}{tag}"
            audit = directory / f"{name}.audit.jsonl"
            with (directory / f"{name}.log").open("w") as log:
                servers[mode] = (
                    name,
                    spawn_node(
                        "bench.modeled_accelerator",
                        {
                            "checkpoint": str(checkpoint),
                            "device": "cpu",
                            "max_sessions": max_sessions,
                            "max_batch_size": max_batch,
                            "batch_window_ms": 0.0,
                            "rtc_enabled": False,
                            "default_task": TASK,
                            "session_idle_timeout_s": 3600.0,
                            "session_first_observation_timeout_s": 3600.0,
                            "audit_log": str(audit),
                            **extra,
                        },
                        log=log,
                        node_name=name,
                        env=environment,
                    ),
                    audit,
                )
        for name, process, _ in servers.values():
            common.wait_for_log(process, directory / f"{name}.log", "ready: serving", 240.0)
    except BaseException:
        for _, process, _ in servers.values():
            stop(process)
        raise
    return servers


class AuditWindow:
    """The audit lines a server wrote inside a window (read from where the file ended when it
    opened)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def open(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def records(self, start_wall: float, end_wall: float) -> list[dict]:
        with self.path.open("rb") as file:
            if file.seek(0, os.SEEK_END) < self.offset:
                self.offset = 0  # rolled over: what is left of the window is in the new file
            file.seek(self.offset)
            lines = file.read().splitlines()
        records = [json.loads(line) for line in lines if line.strip()]
        return [r for r in records if start_wall <= r.get("wall_time", 0.0) <= end_wall]


def measure(
    fleet: Fleet, pid: int, audit: AuditWindow, count: int, seconds: float, settle_s: float
) -> dict:
    """N = ``count`` robots of ``fleet`` streaming: one point's numbers."""
    active = fleet.stream(count)
    try:
        time.sleep(settle_s)
        audit.open()
        load_start, cpu_start, client_start = (
            outside_load.sample(),
            common.cpu_seconds(pid),
            common.cpu_seconds(os.getpid()),
        )
        started, start_wall = time.monotonic_ns(), time.time()
        time.sleep(seconds)
        ended, end_wall = time.monotonic_ns(), time.time()
        load_end, cpu_end, client_end = (
            outside_load.sample(),
            common.cpu_seconds(pid),
            common.cpu_seconds(os.getpid()),
        )
    finally:
        fleet.pause()
    window_s = (ended - started) / 1e9
    answers = {
        robot.client_id: [a for a in robot.answers if started <= a[0] <= ended] for robot in active
    }
    per_robot_p95 = [
        percentile([a[1] for a in rows], 0.95) if rows else math.inf for rows in answers.values()
    ]
    arrivals = sorted(a[0] for rows in answers.values() for a in rows)
    served = (
        (len(arrivals) - 1) / ((arrivals[-1] - arrivals[0]) / 1e9)
        if len(arrivals) >= 2
        else float("nan")
    )
    records = audit.records(start_wall, end_wall)
    forwarded = [r for r in records if r.get("batch_size", 0) > 0 and r.get("outcome") == "ok"]
    forwards = sum(1.0 / r["batch_size"] for r in forwarded)
    busy_s = sum(r["inference_ms"] / 1000.0 / r["batch_size"] for r in forwarded)
    requests = len(records)
    return {
        "count": count,
        "window_s": window_s,
        "chunks": len(arrivals),
        "served": served,
        "p95_worst": max(per_robot_p95),
        "p95_median": median(per_robot_p95),
        "p95_best": min(per_robot_p95),
        "p50": median([a[1] for rows in answers.values() for a in rows]),
        "rate_per_robot": served / count if served == served else float("nan"),
        "busy": busy_s / window_s,
        "forwards": forwards,
        "forward_ms": 1000 * busy_s / forwards if forwards else float("nan"),
        "batch_mean": len(forwarded) / forwards if forwards else float("nan"),
        "host_cpu_ms": 1000 * (cpu_end - cpu_start) / requests if requests else float("nan"),
        "server_cores": (cpu_end - cpu_start) / window_s,
        "client_cpu_ms": 1000 * (client_end - client_start) / max(1, len(arrivals)),
        "starved": sum(a[3] for rows in answers.values() for a in rows) / (count * window_s * FPS),
        "failures": sum(1 for robot in active for t, _ in robot.failures if started <= t <= ended),
        "outside_cores": outside_load.outside_cores(load_start, load_end),
    }


def accelerator_bound(
    curve: Curve, budget_s: float, max_batch: int, tail: bool = True
) -> tuple[float, float]:
    """(N*_acc, b*) for a budget (module docstring); ``tail``: the p95 request's batch b* + z
    sqrt(b*) fits."""
    if budget_s / 2 < curve.seconds(1):
        return 0.0, 0.0
    largest = (
        min(float(max_batch), (budget_s / 2 - curve.t0_s) / curve.k_s)
        if curve.k_s
        else float(max_batch)
    )
    batch = ((math.sqrt(TAIL_Z**2 + 4 * largest) - TAIL_Z) / 2) ** 2 if tail else largest
    return batch / (request_rate(budget_s) * curve.seconds(batch)), batch


def host_bound(cores: int, cpu_ms: float, budget_s: float) -> float:
    return cores / (cpu_ms / 1000.0 * request_rate(budget_s)) if cpu_ms > 0 else math.inf


def broken(row: dict) -> bool:
    """Every robot's p95 breaks the largest budget (or nothing came back)."""
    return not row["chunks"] or row["p95_best"] > max(BUDGETS_S)


def within(rows: dict, budget_s: float) -> int:
    """The most robots measured with every robot's p95 within ``budget_s`` and no failure (0:
    none)."""
    return max(
        (n for n, r in rows.items() if r["p95_worst"] <= budget_s and not r["failures"]), default=0
    )


def geometric(growth: float, most: int) -> list[int]:
    counts, n = [1], 1.0
    while counts[-1] < most:
        n *= growth
        counts.append(min(most, max(counts[-1] + 1, round(n))))
    return counts


def sweep(
    curve: Curve,
    args,
    checkpoint: Path,
    chosen: dict,
    node,
    spinner,
    directory: Path,
    cameras: dict,
) -> dict:
    """Every mode's rows for one profile and g: mode -> {N: row}."""
    servers = start_servers(
        directory,
        curve,
        checkpoint,
        chosen,
        args.max_batch_size,
        max(args.counts or [args.max_robots]),
    )
    fleets = {
        mode: Fleet(
            node, spinner, f"/{name}", f"{mode[:3]}", cameras, SO101_JOINT_NAMES, seed=index
        )
        for index, (mode, (name, _, _)) in enumerate(servers.items())
    }
    audits = {mode: AuditWindow(audit) for mode, (_, _, audit) in servers.items()}
    rows: dict[str, dict[int, dict]] = {mode: {} for mode in servers}

    def point(mode: str, count: int) -> None:
        row = measure(
            fleets[mode], servers[mode][1].pid, audits[mode], count, args.seconds, args.settle_s
        )
        rows[mode][count] = row
        print(
            f"{curve.name} g={curve.gil:g} {mode} N={count}: p95 worst "
            f"{row['p95_worst'] * 1000:.0f} ms, "
            f"{row['served']:.1f} chunks/s, busy {100 * row['busy']:.0f} %, batch "
            f"{row['batch_mean']:.2f}, "
            f"host {row['host_cpu_ms']:.1f} ms/request, outside {row['outside_cores']:.2f} cores",
            flush=True,
        )

    cores = {
        mode: len(os.sched_getaffinity(process.pid)) for mode, (_, process, _) in servers.items()
    }
    try:
        going = list(servers)
        for count in args.counts or geometric(args.growth, args.max_robots):
            for mode in list(going):
                point(mode, count)
                if broken(rows[mode][count]):
                    going.remove(mode)
            if not going:
                break
        if not args.counts and args.tolerance > 0:  # narrow the largest N within each budget
            for mode in servers:
                for budget in BUDGETS_S:
                    while True:
                        low = within(rows[mode], budget)
                        high = min((n for n in rows[mode] if n > low), default=None)
                        if high is None or high - low <= max(1, args.tolerance * low):
                            break
                        point(mode, (low + high) // 2)
    finally:
        for fleet in fleets.values():
            fleet.close()
        common.stop_all([process for _, process, _ in servers.values()])
    return {"rows": rows, "cores": cores}


def admission_check(
    curve: Curve,
    budget_s: float,
    args,
    checkpoint: Path,
    node,
    spinner,
    directory: Path,
    cameras: dict,
) -> dict:
    """A pipelined server with ``latency_budget_ms`` = the budget: robots join one at a time, all
    streaming, until OpenSession refuses one; the count refused first and the server's message
    (compare: the sweep's largest N)."""
    budget_ms = round(budget_s * 1000)
    servers = start_servers(
        directory,
        curve,
        checkpoint,
        {"pipeline": {"pipeline": True, "latency_budget_ms": float(budget_ms)}},
        args.max_batch_size,
        args.max_robots + 1,
        tag=f"_budget{budget_ms}",
    )
    name, process, _ = servers["pipeline"]
    fleet = Fleet(node, spinner, f"/{name}", f"adm{budget_ms}", cameras, SO101_JOINT_NAMES, seed=7)
    admitted, message = 0, ""
    try:
        while admitted < args.max_robots:
            try:
                fleet.stream(admitted + 1)
            except RuntimeError as refused:
                message = str(refused)
                break
            admitted += 1
            # the newcomer's requests reach the server's curve and rate window
            time.sleep(args.ramp_s)
    finally:
        fleet.close()
        common.stop_all([process])
    return {
        "budget_s": budget_s,
        "first_refused": admitted + 1 if message else None,
        "admitted": admitted,
        "message": message,
    }


def admission_lines(curve: Curve, result: dict) -> list[str]:
    lines = []
    for check in result.get("admission", []):
        served = within(result["rows"].get("pipeline", {}), check["budget_s"])
        refused = check["first_refused"]
        verdict = (
            "none refused up to " + str(check["admitted"])
            if refused is None
            else f"{refused - (served + 1):+d}"
        )
        reason = check["message"].split("no session: ", 1)[-1][:220].replace("|", "/")
        lines.append(
            f"| {curve.name} | {curve.gil:g} | {check['budget_s'] * 1000:.0f} ms | {served} | "
            f"{served + 1} "
            f"| {refused if refused is not None else '-'} | {verdict} | {reason} |"
        )
    return lines


def headline(curve: Curve, result: dict, max_batch: int) -> list[str]:
    lines = []
    for budget in BUDGETS_S:
        n_acc, batch = accelerator_bound(curve, budget, max_batch)
        n_mean, _ = accelerator_bound(curve, budget, max_batch, tail=False)
        served = {mode: within(rows, budget) for mode, rows in result["rows"].items()}
        for mode, rows in result["rows"].items():
            at = rows.get(served[mode]) or rows[min(rows)]
            n_host = host_bound(result["cores"][mode], at["host_cpu_ms"], budget)
            bound = min(n_acc, n_host)
            lines.append(
                f"| {curve.name} | {curve.gil:g} | {budget * 1000:.0f} ms | {mode} | "
                f"**{served[mode]}** "
                f"| {n_acc:.1f} (b* {batch:.1f}) | {n_mean:.1f} | {n_host:.1f} "
                f"({at['host_cpu_ms']:.1f} ms at N={at['count']}) "
                f"| {bound:.1f} | {'accelerator' if n_acc <= n_host else 'host'} "
                f"| {served[mode] / bound if bound else float('nan'):.2f} |"
            )
    return lines


def overlap(result: dict) -> str:
    """At the largest N the serial path reached: its host and forward time per batch, and the
    overlap ceiling."""
    serial = result["rows"].get("serial")
    if not serial:
        return ""
    top = serial[max(serial)]
    # below saturation the serial worker idles between batches
    if not top["forwards"] or not broken(top):
        return "The serial path did not saturate in this run: no overlap ceiling measured."
    forward = top["busy"] * top["window_s"] / top["forwards"]
    host = top["window_s"] / top["forwards"] - forward
    text = (
        f"Serial path at N={top['count']}: per batch, host H = {host * 1000:.1f} ms and forward F "
        f"= {forward * 1000:.1f} ms "
        f"(busy {100 * top['busy']:.0f} %); overlap ceiling (H + F) / max(H, F) = "
        f"{(host + forward) / max(host, forward, 1e-9):.2f}x"
    )
    pipeline = result["rows"].get("pipeline", {}).get(top["count"])
    if pipeline:
        text += (
            f"; the pipeline served {pipeline['served'] / top['served']:.2f}x the serial "
            "chunks/s at that N"
        )
    return text + "."


def table(rows_by_mode: dict) -> list[str]:
    lines = [
        "| robots N | mode | every robot's p95 (worst / median / best) | p50 | chunks/s | "
        "requests/s per robot "
        "| accelerator busy | mean batch | host CPU / request | client CPU / request | starved "
        "steps | failures "
        "| outside load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for count in sorted({n for rows in rows_by_mode.values() for n in rows}):
        for mode, rows in rows_by_mode.items():
            if count not in rows:
                continue
            r = rows[count]
            quiet = "" if r["outside_cores"] < outside_load.QUIET_CORES else " DISTURBED"
            lines.append(
                f"| {count} | {mode} | {r['p95_worst'] * 1000:.0f} / {r['p95_median'] * 1000:.0f} "
                f"/ {r['p95_best'] * 1000:.0f} ms "
                f"| {r['p50'] * 1000:.0f} ms | {r['served']:.1f} | {r['rate_per_robot']:.2f} | "
                f"{100 * r['busy']:.0f} % "
                f"| {r['batch_mean']:.2f} | {r['host_cpu_ms']:.1f} ms | {r['client_cpu_ms']:.1f} "
                f"ms | {100 * r['starved']:.1f} % "
                f"| {r['failures']} | {r['outside_cores']:.2f} cores{quiet} |"
            )
    return lines


def plot(results: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(10, 3.4 * len(results)), squeeze=False)
    for (label, result), (left, right) in zip(results.items(), axes, strict=False):
        twin = right.twinx()
        for mode, rows in result["rows"].items():
            counts = sorted(rows)
            left.plot(
                counts,
                [min(rows[n]["p95_worst"], 5.0) * 1000 for n in counts],
                "o-",
                label=f"{mode}: worst robot's p95",
            )
            right.plot(
                counts, [rows[n]["served"] for n in counts], "o-", label=f"{mode}: chunks/s"
            )
            twin.plot(
                counts,
                [100 * rows[n]["busy"] for n in counts],
                "s:",
                label=f"{mode}: accelerator busy (%)",
            )
        for budget in BUDGETS_S:
            left.axhline(budget * 1000, color="k", ls="--", lw=1)
        left.set_yscale("log")
        twin.set_ylim(0, 105)
        for axis in (left, right):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("robots at 30 Hz, chunk 50, replace mode")
        left.set_ylabel("round trip p95 (ms), budgets dashed")
        right.set_ylabel("chunks served per second")
        twin.set_ylabel("modeled accelerator busy (%)")
        left.set_title(f"{label} (modeled accelerator): latency", fontsize=9)
        right.set_title(f"{label} (modeled accelerator): throughput", fontsize=9)
        left.legend(fontsize=7)
        handles, more = right.get_legend_handles_labels(), twin.get_legend_handles_labels()
        right.legend(handles[0] + more[0], handles[1] + more[1], fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES))
    parser.add_argument(
        "--gils",
        type=float,
        nargs="+",
        default=[0.0, 0.5],
        help="GIL shares g of the modeled forward",
    )
    parser.add_argument(
        "--modes", nargs="+", default=["serial", "pipeline"], choices=["serial", "pipeline"]
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="measurement window per point")
    parser.add_argument("--settle-s", type=float, default=4.0, help="streaming before each window")
    parser.add_argument(
        "--counts",
        type=int,
        nargs="+",
        default=None,
        help="robot counts (default: geometric until broken)",
    )
    parser.add_argument("--max-robots", type=int, default=256)
    parser.add_argument(
        "--growth",
        type=float,
        default=1.5,
        help="factor between robot counts of the geometric sweep",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.1,
        help="bisect each budget's largest N to within this share",
    )
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument(
        "--ramp-s",
        type=float,
        default=1.0,
        help="admission check: streaming between two robots joining",
    )
    parser.add_argument(
        "--admission-profiles",
        nargs="*",
        default=["smolvla-gpu", "pi05-gpu"],
        choices=list(PROFILES),
        help="profiles whose admission by latency_budget_ms is checked (act-gpu's limit lies past "
        "what one load client on this machine can open)",
    )
    common.add_output_arguments(parser)
    args = parser.parse_args()
    document, plot_dir = common.outputs(args)
    if args.smoke:
        args.profiles, args.gils, args.counts, args.seconds, args.settle_s = (
            ["act-gpu"],
            [0.5],
            [1, 2],
            2.0,
            1.0,
        )
    chosen = modes(args.modes)
    if not chosen:
        parser.error(
            "no mode to run: this server has no 'pipeline' parameter yet, so only serial can be "
            "measured"
        )
    checkpoint = act_checkpoint()
    cameras = encoded_cameras(CAMERAS, FRAME_SHAPE, POLICY_SIZE)
    load_before = common.load_average()
    started = time.monotonic()

    import rclpy

    rclpy.init()
    node = rclpy.create_node("bench_accelerator_capacity_load")
    spinner = Spinner(node)
    spinner.start()
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for profile in args.profiles:
                for gil in args.gils:
                    curve = Curve.of(profile, gil)
                    result = {
                        "curve": curve,
                        **sweep(
                            curve, args, checkpoint, chosen, node, spinner, Path(tmp), cameras
                        ),
                    }
                    if (
                        "pipeline" in chosen
                        and profile in args.admission_profiles
                        and not args.smoke
                    ):
                        result["admission"] = [
                            admission_check(
                                curve, budget, args, checkpoint, node, spinner, Path(tmp), cameras
                            )
                            for budget in BUDGETS_S
                        ]
                    results[f"{profile}, g={gil:g}"] = result
    finally:
        spinner.stop()
        node.destroy_node()
        rclpy.try_shutdown()
    minutes = (time.monotonic() - started) / 60

    png = plot_dir / "bench_accelerator_capacity.png"
    plot(results, png)
    heads, sections, admissions = [], [], []
    for label, result in results.items():
        curve = result["curve"]
        heads += headline(curve, result, args.max_batch_size)
        admissions += admission_lines(curve, result)
        sections.append(
            f"**{label}** ({curve.describe()}; {PROFILES[curve.name][2]})\n\n"
            + "\n".join(table(result["rows"]))
            + f"\n\n{overlap(result)}\n"
        )
    rates = ", ".join(f"r({b * 1000:.0f} ms) = {request_rate(b):.3f}/s" for b in BUDGETS_S)
    no_pipeline = "" if "pipeline" in chosen else " (this server has no pipeline parameter yet)"
    heads_header = common.table_row(
        "profile",
        "g",
        "budget B",
        "mode",
        "robots served (every p95 <= B)",
        "N*_acc",
        "N*_acc(mean)",
        "N*_host (c)",
        "N*",
        "bound",
        "served / N*",
    )
    admissions_header = common.table_row(
        "profile",
        "g",
        "budget B",
        "sweep: largest N within B",
        "first robot past B",
        "first refused",
        "refused - (N + 1)",
        "the refusal",
    )
    body = f"""
**Modeled accelerator**: the server is the product's own process over the real ROS data plane
(decoding, the
checkpoint's LeRobot pre- and postprocessors, signing, publishing, auditing), with only its forward
replaced by
a model of a device (bench/modeled_accelerator.py): a batch of b takes t(b) = t0 + k*b of wall
time, holding
the GIL for a share g of it. The profiles are assumptions until a GPU run measures them; no number
here
comes from a GPU. Modes measured:
{", ".join(chosen)}{no_pipeline}.

Checkpoint: ACT, random weights, three 224x224 cameras, 6 joints, chunk {CHUNK}, `max_batch_size`
{args.max_batch_size}, `batch_window_ms` 0, `torch_threads` 1, on this machine's CPU. Robots: N
sessions in one load-client
process (bench/paced_robots.py) at {FPS:.0f} Hz, chunk {CHUNK}, replace mode, the executor's
trigger (buffer_time_s
{BUFFER_S:g}, margin {MARGIN:g}, its own windowed p95), each sending three 480x640 frames shrunk to
224x224 and
JPEG-encoded at quality 90, starting at random phases. Per point: {args.settle_s:g} s settle,
{args.seconds:g} s window;
the two modes back to back at each N. Load client and servers share this machine's
{len(os.sched_getaffinity(0))} cores
(the client's own CPU per request is its column); load average (1 min) {load_before:.1f} before;
{minutes:.0f} min in all.

Request rate at a p95 of p (the executor's trigger in replace mode):
r(p) = fps / max(L - floor(fps * theta(p)), fps * d), theta(p) = max(buffer_time_s, min(margin *
p + 1/fps, L/fps));
{rates}.
Bound: N* = min(N*_acc, N*_host), N*_acc = b* / (r(B) t(b*)) with b* the largest mean batch whose
p95 batch
b* + 1.645 sqrt(b*) stays within min(max_batch_size, (B/2 - t0)/k) (at full load each forward takes
what arrived
during the previous one, b = N r t(b) on average and Poisson around it, and a p95 request waits out
one forward and
rides the next, both at the tail batch: about 2 t(b95), the server's own capacity model);
N*_acc(mean) takes b95 = b,
the bound for a typical request;
N*_host = cores / (c r(B)), c the server's host CPU seconds per request (including the modeled
forward's GIL spin,
which stands for an eager forward's kernel launches) at the largest N served within B.

{heads_header}
|---|---|---|---|---|---|---|---|---|---|---|
{chr(10).join(heads)}

Admission by latency (`latency_budget_ms` = B, pipeline): robots join one at a time, all streaming
({args.ramp_s:g} s
between two), until OpenSession refuses one. Goal: the first refused is the first robot the sweep
measured past B
(its largest N within B, plus one), within one.

{admissions_header}
|---|---|---|---|---|---|---|---|
{chr(10).join(admissions) if admissions else "| (not run) | | | | | | | |"}

{chr(10).join(sections)}
![accelerator capacity]({common.image_link(document, png)})
"""
    if args.smoke:
        command = "python -m bench.accelerator_capacity --smoke"
    else:
        sweep_args = (
            f" --counts {' '.join(map(str, args.counts))}"
            if args.counts
            else f" --max-robots {args.max_robots} --growth {args.growth:g} --tolerance "
            f"{args.tolerance:g}"
        )
        command = (
            f"python -m bench.accelerator_capacity --profiles {' '.join(args.profiles)}"
            f" --gils {' '.join(f'{g:g}' for g in args.gils)} --modes {' '.join(chosen)}"
            f" --seconds {args.seconds:g} --settle-s {args.settle_s:g}{sweep_args}"
            f" --admission-profiles {' '.join(args.admission_profiles)} --ramp-s {args.ramp_s:g}"
        )
    common.write_section("accelerator_capacity", command, body, document=document)


if __name__ == "__main__":
    main()
