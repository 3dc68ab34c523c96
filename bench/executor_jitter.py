"""Command-period jitter and CPU use of chunk_executor_node while chunks stream in.

Starts policy_server_node on the default ACT policy, the stand-in robot
driver (test/processes/robot_io.py: joint states + a 96x128 JPEG camera at
30 Hz, records every command with its receive time), and the executor in
forward_command mode, once at 30 Hz and once at 100 Hz. Over a steady-state
window it reports the period between consecutive commands as the driver
receives them (so it includes the executor's timer, the GIL shared with the
network worker, and one DDS hop), and the executor's CPU (utime + stime over
the window, percent of one core) and RSS.

usage: python bench/executor_jitter.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import write_section  # noqa: E402

os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["HF_HUB_OFFLINE"] = "1"

from lerobot_ros.processes import spawn_node, stop  # noqa: E402
from lerobot_ros.sim.default_policy import FRONT_CAMERA, SO101_JOINT_NAMES, default_checkpoint  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def run(fps: float, seconds: float, directory: Path) -> dict:
    prefix = f"/bench{int(fps)}"
    out = directory / f"commands_{int(fps)}.jsonl"
    robot = subprocess.Popen(
        [sys.executable, str(REPO / "test" / "processes" / "robot_io.py"), "--prefix", prefix, "--out", str(out),
         "--command", f"forward_command:{prefix}/commands", "--run-s", str(seconds + 60)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
    )
    parameters = {
        "server_namespace": "/lerobot_bench", "client_id": f"bench{int(fps)}", "fps": fps,
        "joint_names": list(SO101_JOINT_NAMES), "camera_names": [FRONT_CAMERA],
        "camera_topics": [f"{prefix}/camera"], "camera_transports": ["compressed"],
        "state_topic": f"{prefix}/joint_states", "output_topic": f"{prefix}/commands",
        # A 50-step chunk lasts 0.5 s at 100 Hz: keep the staleness bounds above it.
        "buffer_time_s": 0.3, "degraded_after_s": 2.0, "max_action_age_s": 2.5,
    }
    log = (directory / f"executor_{int(fps)}.log").open("w")
    executor = spawn_node("lerobot_ros.executor.node", parameters, log=log, node_name=f"bench_exec_{int(fps)}")
    try:
        time.sleep(5.0)  # start-up, handshake, first chunks
        cpu_before, started = cpu_seconds(executor.pid), time.monotonic()
        time.sleep(seconds)
        cpu_after, ended = cpu_seconds(executor.pid), time.monotonic()
        rss = rss_mb(executor.pid)
    finally:
        stop(executor)
        stop(robot)
        log.close()
    times = [json.loads(line)["t"] for line in out.read_text().splitlines()]
    window = [t for t in times if started <= t <= ended]
    periods_ms = [(b - a) * 1000 for a, b in zip(window, window[1:])]
    nominal = 1000 / fps
    errors = [abs(p - nominal) for p in periods_ms]
    return {
        "fps": fps, "commands": len(window), "expected": round(fps * (ended - started)),
        "p50": statistics.median(periods_ms), "p99": percentile(periods_ms, 0.99), "max": max(periods_ms),
        "err_p50": statistics.median(errors), "err_p99": percentile(errors, 0.99), "err_max": max(errors),
        "late": sum(p > 1.5 * nominal for p in periods_ms),
        "cpu": 100 * (cpu_after - cpu_before) / (ended - started), "rss": rss,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as temp:
        directory = Path(temp)
        server_log = (directory / "server.log").open("w")
        server = spawn_node("lerobot_ros.server.node", {"checkpoint": str(default_checkpoint()), "audit_log": "off"},
                            log=server_log, node_name="lerobot_bench")
        try:
            deadline = time.monotonic() + 180
            while "ready: serving" not in (directory / "server.log").read_text():
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("server did not start:\n" + (directory / "server.log").read_text()[-2000:])
                time.sleep(0.2)
            results = [run(fps, args.seconds, directory) for fps in (30.0, 100.0)]
        finally:
            stop(server)
            server_log.close()
    rows = "\n".join(
        f"| {r['fps']:.0f} Hz | {r['commands']} / {r['expected']} | {r['p50']:.2f} / {r['p99']:.2f} / {r['max']:.2f} ms "
        f"| {r['err_p50']:.2f} / {r['err_p99']:.2f} / {r['err_max']:.2f} ms | {r['late']} | {r['cpu']:.1f} % | {r['rss']:.0f} MB |"
        for r in results
    )
    body = f"""
| control rate | commands received / expected | period p50 / p99 / max | period error p50 / p99 / max | periods > 1.5x nominal | executor CPU (one core) | executor RSS |
|---|---|---|---|---|---|---|
{rows}

Steady state over {args.seconds:.0f} s per rate, forward_command mode, the default ACT policy (chunks of 50) served on
the same 2-core machine (the server's inference competes for the CPU), periods measured where the stand-in driver
receives the commands (executor timer + GIL shared with the network worker + one DDS hop + the driver's own spin).
"""
    write_section("executor_jitter", "python bench/executor_jitter.py", body)


if __name__ == "__main__":
    main()
