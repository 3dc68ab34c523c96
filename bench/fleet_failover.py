"""Failover inside a fleet: empty-queue ticks, time to the first chunk from the new replica, extra
load.

Three policy_server_node replicas of the tiny SmolVLA (RTC-capable) serve one
chunk_executor_node at 30 Hz with the DEFAULT buffer_time_s, staleness bounds,
heartbeat timeout and hedging parameters, its ``server_namespaces`` naming all
three; the stand-in driver (lerobot_ros/standins/robot_io.py) feeds joint
states and a JPEG camera. With ``standby_session`` on (the default) the robot
streams on one replica and holds a warm standby on another; the third is
where its next standby goes after a fault.

For each merge mode (append: ``rtc_requested: false``; RTC replace: true),
``--repeats`` times each, alternating:

* kill -9 of the serving replica (announces nothing: the request in flight,
  or the next one, is late past the hedge deadline and goes to the standby);
* SIGTERM of the serving replica (its last heartbeat announces the drain).

Each fault falls at a random point of the request cycle (a uniform wait of up
to one chunk's duration after the standby is armed again); the faulted
replica is restarted in the background meanwhile, so up to one replica is
loading beside the robot (2 shared cores: that load is part of the figures).

Per mode, first ``--steady-s`` of steady state (the standby armed, no fault): the requests sent per
chunk merged there are what standby and hedging cost a fleet in normal running. Per fault: seconds
from the fault to the first chunk merged from the standby, the control ticks that found the queue
empty from the fault until 1 s after that chunk (``starvation_ticks``), and what the move reacted
to. Per mode: the requests sent per chunk merged over the faults too (hedges and the standby's
re-arming included: the load of a fault-dense stretch).

``--standby off`` runs the same faults without a standby (the placement
after a detected loss), for comparison.

usage: python -m bench.fleet_failover [--repeats N] [--modes append rtc] [--standby on|off]
       [--smoke]
"""

from __future__ import annotations

import argparse
import random
import signal
import tempfile
import time
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.common import median, percentile
from lerobot_ros.sim.default_policy import default_checkpoint
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES

REPLICAS = ("bench_fleet_0", "bench_fleet_1", "bench_fleet_2")
MODES = {"append": ("append", False), "rtc": ("RTC replace", True)}
FAULTS = (("kill -9", signal.SIGKILL), ("SIGTERM drain", signal.SIGTERM))
STATUS_PERIOD_S = 0.05
FPS = 30.0
CHUNK_S = 50 / FPS  # the tiny SmolVLA's chunk: a fault point is drawn over one chunk's playback
# a standby needs a ready replica besides the serving one: a restart can take this long
ARMED_TIMEOUT_S = 120.0


class Replicas:
    """The three servers, each restartable in the background."""

    def __init__(self, directory: Path, checkpoint: Path) -> None:
        self.directory, self.checkpoint = directory, checkpoint
        self.processes: list = [None] * len(REPLICAS)
        self.starts = 0

    def start(self, index: int, wait: bool = True) -> None:
        from lerobot_ros.processes import spawn_node

        self.starts += 1
        log = self.directory / f"{REPLICAS[index]}_{self.starts}.log"  # each start its own log
        with log.open("w") as handle:
            self.processes[index] = spawn_node(
                "lerobot_ros.server.node",
                {"checkpoint": str(self.checkpoint), "audit_log": "off", "device": "cpu"},
                log=handle,
                node_name=REPLICAS[index],
            )
        if wait:
            common.wait_for_log(self.processes[index], log, "ready: serving", 240.0)

    def fault(self, index: int, sig: int) -> float:
        self.processes[index].send_signal(sig)
        return time.monotonic()

    def reap(self, index: int, timeout_s: float = 60.0) -> None:
        self.processes[index].wait(timeout=timeout_s)

    def stop(self) -> None:
        common.stop_all(self.processes)


def armed(status, standby: bool) -> bool:
    return (
        status is not None
        and status.state_name == "STREAMING"
        and (not standby or (status.standby_replica != "" and status.hedge_deadline_ms > 0))
    )


def fault_once(
    watcher, name: str, replicas: Replicas, fault: str, sig: int, standby: bool, rng: random.Random
) -> dict:
    """Wait for a standby, fault the serving replica at a random point, wait for the first chunk
    from another."""
    if not watcher.wait(lambda: armed(watcher.status.get(name), standby), ARMED_TIMEOUT_S):
        raise RuntimeError(
            f"{name}: no standby armed within {ARMED_TIMEOUT_S:.0f} s: {watcher.latest(name)}"
        )
    time.sleep(rng.uniform(0.0, CHUNK_S))
    status = watcher.latest(name)
    serving = REPLICAS.index(status.server_namespace.strip("/"))
    before = common.counters(status)
    fault_at = replicas.fault(serving, sig)
    chunk_at = first = None
    merged = before["chunks_merged"]
    deadline = fault_at + 60.0
    while chunk_at is None and time.monotonic() < deadline:
        status = watcher.latest(name)
        if status.server_namespace.strip("/") == REPLICAS[serving]:
            merged = status.chunks_merged
        elif status.chunks_merged > merged:
            chunk_at, first = time.monotonic(), status
        time.sleep(STATUS_PERIOD_S / 5)
    if chunk_at is None:
        raise RuntimeError(
            f"{name}: no chunk from another replica within 60 s; last status "
            f"{watcher.latest(name)}"
        )
    time.sleep(1.0)
    after = common.counters(watcher.latest(name))
    replicas.reap(serving)
    replicas.start(serving, wait=False)  # the fleet whole again, while the robot goes on
    return {
        "fault": fault,
        "s_to_first_chunk": chunk_at - fault_at,
        "empty_queue_ticks": after["starvation_ticks"] - before["starvation_ticks"],
        "timeouts": after["request_timeouts"] - before["request_timeouts"],
        "reason": first.last_move_reason.partition(": ")[2],
    }


def run_mode(
    watcher,
    directory: Path,
    replicas: Replicas,
    mode: str,
    repeats: int,
    standby: bool,
    rng: random.Random,
    steady_s: float,
) -> dict:
    label, rtc = MODES[mode]
    name = f"fleet_{mode}"
    prefix = f"/{name}"
    robot = common.start_script(
        directory,
        f"{name}_robot",
        [
            "-m",
            "lerobot_ros.standins.robot_io",
            "--prefix",
            prefix,
            "--out",
            str(directory / f"{name}.jsonl"),
            "--run-s",
            "3600",
        ],
    )
    watcher.watch_status(name)
    executor = common.start_executor(
        directory,
        name,
        {
            "server_namespaces": [f"/{replica}" for replica in REPLICAS],
            "client_id": name,
            "fps": FPS,
            "joint_names": list(SO101_JOINT_NAMES),
            "camera_names": [FRONT_CAMERA],
            "camera_topics": [f"{prefix}/camera"],
            "camera_transports": ["compressed"],
            "state_topic": f"{prefix}/joint_states",
            "output_topic": f"{prefix}/commands",
            "rtc_requested": rtc,
            "status_period_s": STATUS_PERIOD_S,
            "standby_session": standby,
        },
    )
    faults = []
    try:
        if not watcher.wait_streaming([name], 3, 120, [executor]):
            raise RuntimeError(
                f"{name} did not stream:\n" + (directory / f"{name}.log").read_text()[-3000:]
            )
        # Steady state first: the standby armed, no fault, the hedges the deadline alone makes.
        if not watcher.wait(lambda: armed(watcher.status.get(name), standby), ARMED_TIMEOUT_S):
            raise RuntimeError(
                f"{name}: no standby armed within {ARMED_TIMEOUT_S:.0f} s: {watcher.latest(name)}"
            )
        quiet = common.counters(watcher.latest(name))
        time.sleep(steady_s)
        steady = common.counters(watcher.latest(name))
        start = steady
        for repeat in range(repeats):
            for fault, sig in FAULTS:
                faults.append(fault_once(watcher, name, replicas, fault, sig, standby, rng))
                print(f"{label} {fault} {repeat + 1}/{repeats}: {faults[-1]}", flush=True)
        end_status = watcher.latest(name)
        end = common.counters(end_status)
    finally:
        common.stop_all([robot, executor])
    merged = end["chunks_merged"] - start["chunks_merged"]
    steady_merged = steady["chunks_merged"] - quiet["chunks_merged"]
    return {
        "label": label,
        "faults": faults,
        "steady_s": steady_s,
        "steady_requests_per_chunk": (steady["requests_sent"] - quiet["requests_sent"])
        / steady_merged
        if steady_merged
        else float("nan"),
        "requests_per_chunk": (end["requests_sent"] - start["requests_sent"]) / merged
        if merged
        else float("nan"),
        "hedges_sent": end_status.hedges_sent,
        "hedges_won": end_status.hedges_won,
        "hedge_answers_dropped": end_status.hedge_answers_dropped,
        "promotions": end_status.standby_promotions,
        "latency_ms_p95": end_status.latency_ms_p95,
        "hedge_deadline_ms": end_status.hedge_deadline_ms,
        "threshold_s": end_status.request_threshold_s,
    }


def reacted_to(reason: str) -> str:
    for key, short in (
        ("hedged request", "hedge"),
        ("announced a drain", "drain"),
        ("heartbeat silent", "heartbeat"),
        ("left the ROS graph", "graph"),
        ("request timeouts", "timeouts"),
    ):
        if key in reason:
            return short
    return reason[:40] or "?"


def table(results: list[dict]) -> list[str]:
    lines = [
        "| mode | fault | faults | with an empty tick | empty-queue ticks, total (max) | to first "
        "chunk from "
        "the standby, median / p95 / max | moved on | request timeouts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for result in results:
        for fault, _ in FAULTS:
            rows = [r for r in result["faults"] if r["fault"] == fault]
            if not rows:
                continue
            ticks = [r["empty_queue_ticks"] for r in rows]
            seconds = [r["s_to_first_chunk"] for r in rows]
            causes = {}
            for r in rows:
                causes[reacted_to(r["reason"])] = causes.get(reacted_to(r["reason"]), 0) + 1
            lines.append(
                f"| {result['label']} | {fault} | {len(rows)} | {sum(t > 0 for t in ticks)} | "
                f"{sum(ticks)} "
                f"({max(ticks)}) | {median(seconds):.2f} / {percentile(seconds, 0.95):.2f} / "
                f"{max(seconds):.2f} s | "
                f"{', '.join(f'{k} {v}' for k, v in sorted(causes.items()))} | "
                f"{sum(r['timeouts'] for r in rows)} |"
            )
    return lines


def load_table(results: list[dict]) -> list[str]:
    lines = [
        "| mode | requests per chunk merged, steady state (no fault) | over the faults | hedges "
        "sent (won / "
        "answers dropped) | standby promotions | round trip p95 at the end | hedge deadline | "
        "request threshold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['label']} | **{r['steady_requests_per_chunk']:.3f}** ({r['steady_s']:.0f} s) | "
            f"{r['requests_per_chunk']:.3f} | {r['hedges_sent']} ({r['hedges_won']} / "
            f"{r['hedge_answers_dropped']}) | {r['promotions']} | {r['latency_ms_p95']:.0f} ms | "
            f"{r['hedge_deadline_ms']:.0f} ms | {r['threshold_s']:.2f} s |"
        )
    return lines


def verdict(results: list[dict], standby: bool) -> str:
    if not standby:
        return "Run without a standby (comparison): no goal is judged from it."
    dry = [
        f"{r['label']}, {f['fault']}"
        for r in results
        for f in r["faults"]
        if f["empty_queue_ticks"]
    ]
    ticks = "Goal 0 empty-queue ticks for kill -9 and drain in both modes: " + (
        "**met** (" + ", ".join(f"{len(r['faults'])} faults {r['label']}" for r in results) + ")."
        if not dry
        else f"**missed** in {len(dry)} of {sum(len(r['faults']) for r in results)} faults ("
        + "; ".join(sorted(set(dry)))
        + ")."
    )
    heavy = [r for r in results if not r["steady_requests_per_chunk"] <= 1.1]
    load = (
        "Goal at most 1.1 requests per chunk merged (steady state, the standby armed): "
        + ("**met**" if not heavy else "**missed**")
        + " ("
        + ", ".join(f"{r['label']} {r['steady_requests_per_chunk']:.3f}" for r in results)
        + "); over the fault-dense part, where every promotion re-arms a standby: "
        + ", ".join(f"{r['label']} {r['requests_per_chunk']:.3f}" for r in results)
        + "."
    )
    return ticks + "\n\n" + load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=20, help="faults of each kind per mode")
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=list(MODES))
    parser.add_argument(
        "--standby", choices=("on", "off"), default="on", help="the executor's standby_session"
    )
    parser.add_argument("--seed", type=int, default=0, help="for the fault points")
    parser.add_argument(
        "--steady-s",
        type=float,
        default=60.0,
        help="seconds of steady state (standby armed, no fault) measured first, per mode",
    )
    common.add_output_arguments(parser)
    args = parser.parse_args()
    document, _ = common.outputs(args)
    if args.smoke:
        args.repeats, args.modes, args.steady_s = 1, ["rtc"], 5.0
    standby = args.standby == "on"
    rng = random.Random(args.seed)
    load_before = common.load_average()
    results = []
    watcher = common.Watcher("bench_fleet")
    # Logs are kept: a failed move is read in the executor's and the servers' logs.
    logs = Path(tempfile.mkdtemp(prefix="bench_fleet_"))
    print(f"logs in {logs}", flush=True)
    replicas = Replicas(logs, default_checkpoint("smolvla"))
    began = time.monotonic()
    try:
        for index in range(len(REPLICAS)):
            replicas.start(index, wait=False)
        for index in range(len(REPLICAS)):
            common.wait_for_log(
                replicas.processes[index],
                logs / f"{REPLICAS[index]}_{index + 1}.log",
                "ready: serving",
                300.0,
            )
        for mode in args.modes:
            results.append(
                run_mode(watcher, logs, replicas, mode, args.repeats, standby, rng, args.steady_s)
            )
    finally:
        replicas.stop()
        watcher.close()
    load_after = common.load_average()
    minutes = (time.monotonic() - began) / 60

    body = f"""
Three replicas of the tiny SmolVLA, one executor at 30 Hz with the defaults: buffer_time_s 0.5 s,
heartbeat_timeout_s 2 s, request_timeout_s 1 s, standby_session **{args.standby}**, hedge deadline
max(hedge_min_deadline_s 0.1 s, hedge_deadline_factor 2 x the p95 round trip). {args.repeats}
faults of each
kind per mode, after {args.steady_s:.0f} s of steady state (no fault), alternating kill -9 and
SIGTERM, each at
a random point of the request cycle (seed {args.seed}) after the standby was armed again; the
faulted
replica restarts in the background meanwhile. {minutes:.0f} min; load average (1 min)
{load_before:.1f} before, {load_after:.1f} after (2 cores, shared).

{chr(10).join(table(results))}

{chr(10).join(load_table(results))}

{verdict(results, standby)}
"""
    command = "python -m bench.fleet_failover" + (
        " --smoke"
        if args.smoke
        else f" --repeats {args.repeats} --modes {' '.join(args.modes)}"
        + (" --standby off" if not standby else "")
    )
    common.write_section("fleet_failover", command, body, document=document)


if __name__ == "__main__":
    main()
