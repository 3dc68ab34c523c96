"""Rebalancing: how long until three robots on one replica are 2/1 after a second replica comes up.

Two policy_server_node replicas of the default ACT policy and three
chunk_executor_node robots (stand-in drivers, JPEG camera) at 30 Hz with the
DEFAULT rebalancing parameters (``rebalance_period_s`` 5 s, each robot at its
own random phase; ``rebalance_cooldown_s`` 10 s; hysteresis 0) and the warm
standby on; ``server_namespaces`` lists both replicas.

Per repeat: the three robots stream on replica 0 while replica 1 is down;
replica 1 is started; the figure is the time from its "ready: serving" log
line to the fleet being 2/1 (as the executors' ~/status report where they
stream). The fleet is then watched for ``--hold-s`` (default: two cooldowns and
two periods, so every robot looks several times) for moves beyond the one
needed (an oscillation, or two robots moving in the same instant), and the
control ticks that found a moved robot's queue empty are counted. Replica 1
is then drained (SIGTERM): its robot moves back to replica 0, and the next
repeat starts from 3/0.

usage: python -m bench.fleet_rebalancing [--repeats N] [--smoke]
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from pathlib import Path

from bench import common  # first: it isolates the ROS graph and keeps the Hub offline
from bench.common import median, percentile
from lerobot_ros.sim.default_policy import default_checkpoint
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES

REPLICAS = ("bench_rebal_0", "bench_rebal_1")
ROBOTS = ("bench_rebal_r1", "bench_rebal_r2", "bench_rebal_r3")
STATUS_PERIOD_S = 0.1
FPS = 30.0
#: Defaults of the executor's parameters (settings.py); --smoke shortens them for CI's time.
PERIOD_S, COOLDOWN_S = 5.0, 10.0


def spread(watcher) -> dict[str, int]:
    """Robots per replica, as their executors report where they stream (lock-free: ``Watcher.wait``
    holds the watcher's lock while it calls a predicate)."""
    counts = {f"/{replica}": 0 for replica in REPLICAS}
    for name in ROBOTS:
        status = watcher.status.get(name)
        if status is not None and status.server_namespace in counts:
            counts[status.server_namespace] += 1
    return counts


def start_replica(directory: Path, index: int, starts: list[int]):
    from lerobot_ros.processes import spawn_node

    starts[index] += 1
    log = directory / f"{REPLICAS[index]}_{starts[index]}.log"
    with log.open("w") as handle:
        process = spawn_node(
            "lerobot_ros.server.node",
            {"checkpoint": str(default_checkpoint("act")), "audit_log": "off", "device": "cpu"},
            log=handle,
            node_name=REPLICAS[index],
        )
    common.wait_for_log(process, log, "ready: serving", 240.0)
    return process


def repeat_once(
    watcher, directory: Path, starts: list[int], hold_s: float, timeout_s: float
) -> dict:
    """From 3/0: start replica 1, time the fleet to 2/1, hold, drain replica 1 back to 3/0."""
    before = {
        name: common.counters(watcher.latest(name)) | {"moves": watcher.latest(name).replica_moves}
        for name in ROBOTS
    }
    second = start_replica(directory, 1, starts)
    ready_at = time.monotonic()
    if not watcher.wait(lambda: sorted(spread(watcher).values()) == [1, 2], timeout_s):
        second.send_signal(signal.SIGTERM)
        raise RuntimeError(
            f"not 2/1 within {timeout_s:.0f} s of the second replica's start: {spread(watcher)}"
        )
    balanced_s = time.monotonic() - ready_at
    time.sleep(hold_s)
    held = spread(watcher)
    after = {
        name: common.counters(watcher.latest(name)) | {"moves": watcher.latest(name).replica_moves}
        for name in ROBOTS
    }
    moved = [name for name in ROBOTS if after[name]["moves"] > before[name]["moves"]]
    figures = {
        "s_to_2_1": balanced_s,
        "moves": sum(after[name]["moves"] - before[name]["moves"] for name in ROBOTS),
        "still_2_1": sorted(held.values()) == [1, 2],
        "empty_ticks_moved": sum(
            after[name]["starvation_ticks"] - before[name]["starvation_ticks"] for name in moved
        ),
        "timeouts_moved": sum(
            after[name]["request_timeouts"] - before[name]["request_timeouts"] for name in moved
        ),
        "reason": watcher.latest(moved[0]).last_move_reason if moved else "",
    }
    # its robot moves back (a drain): the next repeat starts from 3/0
    second.send_signal(signal.SIGTERM)
    if not watcher.wait(lambda: spread(watcher)[f"/{REPLICAS[0]}"] == 3, 60.0):
        raise RuntimeError(
            f"the robots did not return to the first replica after the drain: {spread(watcher)}"
        )
    second.wait(timeout=60)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5, help="times the second replica comes up")
    parser.add_argument(
        "--hold-s",
        type=float,
        default=None,
        help="watching for further moves after 2/1 (default: 2 x (cooldown + period))",
    )
    common.add_output_arguments(parser)
    args = parser.parse_args()
    document, _ = common.outputs(args)
    period_s, cooldown_s = (1.0, 3.0) if args.smoke else (PERIOD_S, COOLDOWN_S)
    repeats = 1 if args.smoke else args.repeats
    hold_s = args.hold_s if args.hold_s is not None else 2 * (cooldown_s + period_s)
    load_before = common.load_average()
    watcher = common.Watcher("bench_rebal")
    logs = Path(tempfile.mkdtemp(prefix="bench_rebal_"))
    print(f"logs in {logs}", flush=True)
    starts = [0, 0]
    processes, rows = [], []
    began = time.monotonic()
    try:
        processes.append(start_replica(logs, 0, starts))
        for name in ROBOTS:
            prefix = f"/{name}"
            processes.append(
                common.start_script(
                    logs,
                    f"{name}_robot",
                    [
                        "-m",
                        "lerobot_ros.standins.robot_io",
                        "--prefix",
                        prefix,
                        "--out",
                        str(logs / f"{name}.jsonl"),
                        "--run-s",
                        "7200",
                    ],
                )
            )
            watcher.watch_status(name)
            processes.append(
                common.start_executor(
                    logs,
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
                        "status_period_s": STATUS_PERIOD_S,
                        "handshake_timeout_s": 60.0,
                        "rebalance_period_s": period_s,
                        "rebalance_cooldown_s": cooldown_s,
                    },
                )
            )
        if not watcher.wait_streaming(list(ROBOTS), 3, 180, processes):
            raise RuntimeError(f"the robots did not stream: {spread(watcher)}")
        for repeat in range(repeats):
            rows.append(
                repeat_once(watcher, logs, starts, hold_s, 120.0 + 4 * (cooldown_s + period_s))
            )
            print(f"repeat {repeat + 1}/{repeats}: {rows[-1]}", flush=True)
    finally:
        common.stop_all(processes)
        watcher.close()
    load_after = common.load_average()
    minutes = (time.monotonic() - began) / 60
    seconds = [row["s_to_2_1"] for row in rows]
    extra = sum(row["moves"] - 1 for row in rows)
    header = common.table_row(
        "repeats",
        "from the second replica ready to 2/1, median / p95 / max",
        "moves per repeat (1 needed)",
        f"still 2/1 after {hold_s:g} s",
        "empty-queue ticks of moved robots",
        "request timeouts of moved robots",
    )
    values = common.table_row(
        len(rows),
        f"**{median(seconds):.1f}** / {percentile(seconds, 0.95):.1f} / {max(seconds):.1f} s",
        ", ".join(str(row["moves"]) for row in rows),
        f"{sum(row['still_2_1'] for row in rows)} of {len(rows)}",
        sum(row["empty_ticks_moved"] for row in rows),
        sum(row["timeouts_moved"] for row in rows),
    )
    body = f"""
Two replicas of the default ACT policy (CPU), three robots at 30 Hz listing both, the warm standby
on,
rebalance_period_s {period_s:g} s (each robot at its own random phase), rebalance_cooldown_s
{cooldown_s:g} s,
hysteresis 0. Per repeat the second replica comes up while all three robots stream on the first;
the fleet is
watched {hold_s:g} s more, then the second replica is drained and its robot goes back. {len(rows)}
repeats,
{minutes:.0f} min; load average (1 min) {load_before:.1f} before, {load_after:.1f} after (2 cores,
shared).

{header}
|---|---|---|---|---|---|
{values}

Moves beyond the one needed: {extra} (two robots moving in the same instant, or a move back). A
move's reason, as
~/status gives it: "{rows[0]["reason"] if rows else ""}".
"""
    command = "python -m bench.fleet_rebalancing" + (
        " --smoke" if args.smoke else f" --repeats {repeats}"
    )
    common.write_section("fleet_rebalancing", command, body, document=document)


if __name__ == "__main__":
    main()
