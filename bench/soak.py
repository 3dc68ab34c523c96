"""Soak: one policy_server_node and four chunk_executor_nodes streaming for minutes.

Runs the server (the default ACT policy unless ``--checkpoint``), four
stand-in robot drivers (lerobot_ros/standins/robot_io.py: joint states and a JPEG
camera at 30 Hz) and four executors, all as separate processes, for
``--minutes`` after they stream. While they run it samples the resident
memory (RSS) of every node and listens to the server's heartbeat and every
executor's status. At the end it checks, and writes into docs/reference/reliability.md:

- memory: RSS of the server and of each executor at the start and end of the
  window, and its growth (a leak grows steadily);
- sessions and topics: the server holds exactly one session and one pair of
  data-plane endpoints per executor, and none once the executors are gone
  (two are stopped with SIGINT, which closes their sessions; two are killed,
  which leaves them to the server's idle timeout);
- heartbeats: no gap in the heartbeat sequence numbers received;
- audit: with the executors paused (no request in flight), every request an
  executor sent is one audit line (or counted as superseded in the next
  one), and the server's counters agree with its audit log.

usage: python -m bench.soak --minutes 5          # the soak (about 7 minutes in all)
       python -m bench.soak --minutes 0.25 --document /tmp/soak.md   # a smoke run
Exit code 0 when every check passes; the last stdout line is a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import outside_load
from bench.report import RELIABILITY_MD, table_row, write_section

# An isolated ROS graph, as the test suite has: never a robot on the network.
os.environ["ROS_DOMAIN_ID"] = os.environ.get("LEROBOT_ROS_TEST_DOMAIN_ID") or str(
    1 + os.getpid() % 100
)
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")

import rclpy  # noqa: E402
from std_srvs.srv import Trigger  # noqa: E402

from lerobot_ros.msg import ExecutorStatus, ServerStatus  # noqa: E402
from lerobot_ros.processes import spawn_node, stop  # noqa: E402
from lerobot_ros.protocol.qos import STATUS_QOS  # noqa: E402
from lerobot_ros.sim.default_policy import default_checkpoint  # noqa: E402
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SERVER = "lerobot_soak"
IDLE_TIMEOUT_S = 5.0
SERVER_GC_PERIOD_S = 1.0
# Above the defaults (1 s, 0.5 s): four clients share one inference worker on
# a small CPU machine, so a request waits for up to three others. The soak is
# about leaks and losses; starvation under load is reported, not failed.
REQUEST_TIMEOUT_S = 2.0
BUFFER_TIME_S = 1.0
STATUS_PERIOD_S = 0.2


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


@dataclass
class Node:
    name: str
    process: subprocess.Popen
    rss: list[tuple[float, float]] = field(default_factory=list)  # (seconds into the window, MB)

    def sample(self, at: float) -> None:
        value = rss_mb(self.process.pid)
        if value is not None:
            self.rss.append((at, value))

    def growth(self) -> dict:
        values = [mb for _, mb in self.rss]
        if not values:
            return {
                "start_mb": None,
                "end_mb": None,
                "growth_mb": None,
                "max_mb": None,
                "second_half_mb_per_min": None,
            }
        half = [(at, mb) for at, mb in self.rss if at >= self.rss[-1][0] / 2]
        slope = None
        if len(half) >= 2 and half[-1][0] > half[0][0]:
            # Least-squares slope over the second half: warm-up growth is over by then.
            mean_t = sum(at for at, _ in half) / len(half)
            mean_mb = sum(mb for _, mb in half) / len(half)
            num = sum((at - mean_t) * (mb - mean_mb) for at, mb in half)
            den = sum((at - mean_t) ** 2 for at, _ in half)
            slope = 60.0 * num / den if den else 0.0
        return {
            "start_mb": values[0],
            "end_mb": values[-1],
            "growth_mb": values[-1] - values[0],
            "max_mb": max(values),
            "second_half_mb_per_min": slope,
        }


class Monitor:
    """The soak's own rclpy node: server heartbeat, executor statuses and graph queries."""

    def __init__(self, executors: list[str]) -> None:
        rclpy.init()
        self.node = rclpy.create_node(f"soak_monitor_{os.getpid()}")
        self.beats: list[tuple[float, ServerStatus]] = []
        # Deeper than the publisher's keep-last 1 so a busy monitor never drops beats itself.
        self.node.create_subscription(
            ServerStatus,
            f"/{SERVER}/status",
            lambda m: self.beats.append((time.monotonic(), m)),
            100,
        )
        self.statuses: dict[str, list[tuple[float, ExecutorStatus]]] = {
            name: [] for name in executors
        }
        for name in executors:
            self.node.create_subscription(
                ExecutorStatus,
                f"/{name}/status",
                lambda m, name=name: self.statuses[name].append((time.monotonic(), m)),
                STATUS_QOS,
            )

    def spin(self, seconds: float, until=None) -> bool:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if until is not None and until():
                return True
            rclpy.spin_once(self.node, timeout_sec=0.05)
        return until() if until is not None else True

    def latest(self, name: str) -> ExecutorStatus | None:
        return self.statuses[name][-1][1] if self.statuses[name] else None

    def server_endpoints(self) -> dict[str, int]:
        """Data-plane topics of the server and how many endpoints the server itself has on each."""
        prefix = f"/{SERVER}/clients/"
        counts = {}
        for topic, _ in self.node.get_topic_names_and_types():
            if topic.startswith(prefix):
                infos = self.node.get_publishers_info_by_topic(
                    topic
                ) + self.node.get_subscriptions_info_by_topic(topic)
                mine = sum(1 for info in infos if info.node_name == SERVER)
                if mine:
                    counts[topic] = mine
        return counts

    def trigger(self, service: str, timeout_s: float = 5.0) -> bool:
        client = self.node.create_client(Trigger, service)
        try:
            if not client.wait_for_service(timeout_sec=timeout_s):
                return False
            future = client.call_async(Trigger.Request())
            self.spin(timeout_s, future.done)
            return future.done() and future.result() is not None and future.result().success
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        self.node.destroy_node()
        rclpy.try_shutdown()


def executor_parameters(client_id: str) -> dict:
    prefix = f"/{client_id}"
    return {
        "server_namespace": f"/{SERVER}",
        "client_id": client_id,
        "joint_names": list(SO101_JOINT_NAMES),
        "camera_names": [FRONT_CAMERA],
        "camera_topics": [f"{prefix}/camera"],
        "camera_transports": ["compressed"],
        "state_topic": f"{prefix}/joint_states",
        "output_topic": f"{prefix}/commands",
        "request_timeout_s": REQUEST_TIMEOUT_S,
        "buffer_time_s": BUFFER_TIME_S,
        "status_period_s": STATUS_PERIOD_S,
        "handshake_timeout_s": 30.0,
    }


def heartbeat_figures(beats: list[tuple[float, ServerStatus]], start: float, end: float) -> dict:
    window = [(at, msg.heartbeat_seq) for at, msg in beats if start <= at <= end]
    seqs = [seq for _, seq in window]
    missed = sum(max(0, b - a - 1) for a, b in zip(seqs, seqs[1:], strict=False))
    reordered = sum(1 for a, b in zip(seqs, seqs[1:], strict=False) if b <= a)
    intervals = [b - a for (a, _), (b, _) in zip(window, window[1:], strict=False)]
    return {
        "received": len(seqs),
        "missed": missed,
        "out_of_order": reordered,
        "max_interval_s": round(max(intervals), 3) if intervals else None,
    }


def executor_figures(
    statuses: list[tuple[float, ExecutorStatus]], start: float, end: float
) -> dict:
    window = [msg for at, msg in statuses if start <= at <= end]
    if not window:
        return {"statuses": 0}
    first, last = window[0], window[-1]
    episodes = {}
    previous = None
    for msg in window:
        if msg.state_name != previous:
            episodes[msg.state_name] = episodes.get(msg.state_name, 0) + 1
            previous = msg.state_name
    delta = lambda field: getattr(last, field) - getattr(first, field)  # noqa: E731
    return {
        "statuses": len(window),
        "states": episodes,
        "reasons_not_streaming": sorted(
            {
                re.sub(r"[0-9.]+ s old", "N s old", m.reason)
                for m in window
                if m.state_name not in ("STREAMING", "DEGRADED")
            }
        )[:4],
        "commands": delta("commands_published"),
        "requests": delta("requests_sent"),
        "chunks": delta("chunks_merged"),
        "dropped": delta("chunks_dropped"),
        "timeouts": delta("request_timeouts"),
        "starvation_ticks": delta("starvation_ticks"),
        "fallback_ticks": delta("fallback_ticks"),
        "latency_ms_p95": round(last.latency_ms_p95, 1),
    }


def audit_lines(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run(args) -> tuple[dict, list[str]]:
    directory = Path(args.output_dir or tempfile.mkdtemp(prefix="lerobot_ros_soak_"))
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = Path(args.checkpoint) if args.checkpoint else default_checkpoint()
    audit = directory / "audit.jsonl"
    names = [f"soak_{i + 1}" for i in range(args.executors)]
    executor_names = [f"exec_{name}" for name in names]
    window_s = args.minutes * 60.0
    problems: list[str] = []
    monitor = Monitor(executor_names)
    robots: list[subprocess.Popen] = []
    executors: dict[str, Node] = {}
    with (directory / "server.log").open("w") as log:
        server = Node(
            "policy_server_node",
            spawn_node(
                "lerobot_ros.server.node",
                {
                    "checkpoint": str(checkpoint),
                    "audit_log": str(audit),
                    "max_sessions": 8,
                    "session_idle_timeout_s": IDLE_TIMEOUT_S,
                },
                log=log,
                node_name=SERVER,
            ),
        )
    try:
        if (
            not monitor.spin(300, lambda: monitor.beats or server.process.poll() is not None)
            or not monitor.beats
        ):
            raise RuntimeError(
                "the server did not come up:\n" + (directory / "server.log").read_text()[-3000:]
            )
        for name, executor_name in zip(names, executor_names, strict=False):
            robots.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "lerobot_ros.standins.robot_io",
                        "--prefix",
                        f"/{name}",
                        "--out",
                        str(directory / f"{name}_commands.jsonl"),
                        "--run-s",
                        str(window_s + 600),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )
            )
            with (directory / f"{executor_name}.log").open("w") as log:
                executors[executor_name] = Node(
                    executor_name,
                    spawn_node(
                        "lerobot_ros.executor.node",
                        executor_parameters(name),
                        log=log,
                        node_name=executor_name,
                    ),
                )

        def streaming():
            return all(
                (s := monitor.latest(n)) is not None and s.chunks_merged >= 2
                for n in executor_names
            )

        if not monitor.spin(180, streaming):
            raise RuntimeError(
                "not every executor streamed: "
                + ", ".join(
                    f"{n} {monitor.latest(n).state_name if monitor.latest(n) else 'silent'}"
                    for n in executor_names
                )
            )

        # ---- the window
        start = time.monotonic()
        nodes = [server, *executors.values()]
        next_sample = start
        while time.monotonic() < start + window_s:
            if time.monotonic() >= next_sample:
                for node in nodes:
                    node.sample(time.monotonic() - start)
                next_sample += args.sample_s
            monitor.spin(min(0.5, max(0.0, start + window_s - time.monotonic())))
            dead = [node.name for node in nodes if node.process.poll() is not None]
            if dead:
                raise RuntimeError(f"exited during the soak: {dead}")
        end = time.monotonic()
        load_at_end = os.getloadavg()[0]
        for node in nodes:
            node.sample(end - start)

        # ---- sessions and topics while all stream
        monitor.spin(1.0)
        sessions_streaming = monitor.beats[-1][1].active_sessions
        endpoints_streaming = monitor.server_endpoints()

        # ---- audit: pause everyone, let the requests in flight finish, then count
        paused = [monitor.trigger(f"/{name}/pause") for name in executor_names]
        monitor.spin(REQUEST_TIMEOUT_S + 1.5)
        final = {name: monitor.latest(name) for name in executor_names}
        served = monitor.beats[-1][1]
        lines = audit_lines(audit)

        # ---- the executors go: two close their sessions (SIGINT), two vanish (SIGKILL)
        stopped_at = time.monotonic()
        exit_codes = {}
        for index, (name, node) in enumerate(executors.items()):
            if index % 2 == 0:
                exit_codes[name] = stop(node.process, timeout_s=10)
            else:
                node.process.send_signal(signal.SIGKILL)
                exit_codes[name] = node.process.wait()
        bound_s = IDLE_TIMEOUT_S + SERVER_GC_PERIOD_S + 3.0
        gone = lambda: monitor.beats[-1][1].active_sessions == 0 and not monitor.server_endpoints()  # noqa: E731
        collected = monitor.spin(bound_s + 10, gone)
        collected_s = time.monotonic() - stopped_at
        sessions_after, endpoints_after = (
            monitor.beats[-1][1].active_sessions,
            monitor.server_endpoints(),
        )
        server_alive = server.process.poll() is None
    finally:
        for node in executors.values():
            if node.process.poll() is None:
                stop(node.process, timeout_s=10)
        for robot in robots:
            stop(robot, timeout_s=5)
        server_exit = stop(server.process, timeout_s=30)
        monitor.close()

    # ---- figures and checks
    memory = {node.name: node.growth() for node in [server, *executors.values()]}
    heartbeats = heartbeat_figures(monitor.beats, start, end)
    streams = {
        name: executor_figures(monitor.statuses[name], start, end) for name in executor_names
    }
    audit_rows = {}
    for name, executor_name in zip(names, executor_names, strict=False):
        mine = [line for line in lines if line["client"] == name]
        status = final[executor_name]
        audit_rows[name] = {
            "requests_sent": status.requests_sent,
            "audit_lines": len(mine),
            "superseded": sum(line["superseded"] for line in mine),
            "ok": sum(1 for line in mine if line["outcome"] == "ok"),
            "chunks_merged": status.chunks_merged,
            "chunks_dropped": status.chunks_dropped,
            "request_timeouts": status.request_timeouts,
        }
    server_counted = served.requests_served + served.requests_rejected

    expected_endpoints = 2 * args.executors
    if not all(paused):
        refused = [n for n, ok in zip(executor_names, paused, strict=False) if not ok]
        problems.append(f"pause refused by {refused}")
    if sessions_streaming != args.executors:
        problems.append(f"{sessions_streaming} sessions while {args.executors} executors streamed")
    if (
        sum(endpoints_streaming.values()) != expected_endpoints
        or len(endpoints_streaming) != expected_endpoints
    ):
        problems.append(
            f"server data-plane endpoints while streaming: {endpoints_streaming}, expected "
            f"{expected_endpoints}"
        )
    if not collected or sessions_after != 0 or endpoints_after:
        problems.append(
            f"after the executors left: {sessions_after} sessions, endpoints {endpoints_after}"
        )
    if heartbeats["missed"] or heartbeats["out_of_order"]:
        problems.append(
            f"heartbeats missed {heartbeats['missed']}, out of order {heartbeats['out_of_order']}"
        )
    for name, row in audit_rows.items():
        if row["requests_sent"] != row["audit_lines"] + row["superseded"]:
            problems.append(
                f"{name}: {row['requests_sent']} requests sent, {row['audit_lines']} audited "
                f"+ {row['superseded']} superseded"
            )
        if row["ok"] < row["chunks_merged"]:
            problems.append(
                f"{name}: merged {row['chunks_merged']} chunks but only {row['ok']} were served"
            )
    if server_counted != len(lines):
        problems.append(
            f"server counted {server_counted} requests, its audit log has {len(lines)} lines"
        )
    for name, figures in memory.items():
        if figures["growth_mb"] is not None and figures["growth_mb"] > args.max_rss_growth_mb:
            problems.append(
                f"{name} RSS grew {figures['growth_mb']:.1f} MB (> {args.max_rss_growth_mb} MB)"
            )
    # Starvation on a loaded machine (STALLED, even a timeout streak) is reported, not failed:
    # the soak is about leaks and losses. OFFLINE or DEAD (motion stopped) is a failure.
    notes = []
    for name, figures in streams.items():
        left = set(figures.get("states", {})) - {"STREAMING", "DEGRADED"}
        if left & {"OFFLINE", "DEAD"}:
            problems.append(
                f"{name} went {' and '.join(sorted(left & {'OFFLINE', 'DEAD'}))}: "
                f"{figures['reasons_not_streaming']}"
            )
        elif left:
            notes.append(
                f"{name} "
                + ", ".join(f"{state} x{figures['states'][state]}" for state in sorted(left))
            )
    if not server_alive or server_exit != 0:
        problems.append(f"server alive at the end {server_alive}, exit code {server_exit}")

    summary = {
        "minutes": args.minutes,
        "executors": args.executors,
        "window_s": round(end - start, 1),
        "load_average": load_at_end,
        "memory": memory,
        "heartbeats": heartbeats,
        "executor_streams": streams,
        "audit": audit_rows,
        "server_requests_counted": server_counted,
        "audit_lines_total": len(lines),
        "sessions_streaming": sessions_streaming,
        "server_endpoints_streaming": sum(endpoints_streaming.values()),
        "sessions_after": sessions_after,
        "server_endpoints_after": sum(endpoints_after.values()),
        "s_to_collect_after_executors_left": round(collected_s, 2),
        "executor_exit_codes": exit_codes,
        "server_exit_code": server_exit,
        "problems": problems,
        "notes": notes,
        "output_dir": str(directory),
    }
    return summary, problems


def mb(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def render(summary: dict, args) -> str:
    memory_rows = "\n".join(
        f"| {name} | {mb(m['start_mb'])} | {mb(m['end_mb'])} | {mb(m['growth_mb'])} | "
        f"{mb(m['max_mb'])} "
        f"| {mb(m['second_half_mb_per_min'])} |"
        for name, m in summary["memory"].items()
    )
    stream_rows = "\n".join(
        f"| {name} | {s.get('commands', 0)} | {s.get('requests', 0)} | {s.get('chunks', 0)} | "
        f"{s.get('dropped', 0)} "
        f"| {s.get('timeouts', 0)} | {s.get('starvation_ticks', 0)} | "
        f"{s.get('fallback_ticks', 0)} "
        f"| {s.get('latency_ms_p95', 0)} | "
        f"{', '.join(f'{k} x{v}' for k, v in s.get('states', {}).items())} |"
        for name, s in summary["executor_streams"].items()
    )
    audit_rows = "\n".join(
        f"| {name} | {a['requests_sent']} | {a['audit_lines']} | {a['superseded']} | {a['ok']} | "
        f"{a['chunks_merged']} "
        f"| {a['chunks_dropped']} | {a['request_timeouts']} |"
        for name, a in summary["audit"].items()
    )
    stream_header = table_row(
        "executor",
        "commands",
        "requests",
        "chunks merged",
        "dropped",
        "timeouts",
        "starvation ticks",
        "fallback ticks",
        "latency p95 (ms)",
        "states",
    )
    audit_header = table_row(
        "client",
        "requests sent",
        "audit lines",
        "superseded",
        "ok",
        "chunks merged",
        "chunks dropped",
        "request timeouts",
    )
    beats = summary["heartbeats"]
    verdict = (
        "**all checks passed**."
        if not summary["problems"]
        else "**FAILED**: " + "; ".join(summary["problems"]) + "."
    )
    if summary["notes"]:
        reasons = sorted(
            {
                r
                for s in summary["executor_streams"].values()
                for r in s.get("reasons_not_streaming", [])
            }
        )
        verdict += (
            " Noted (reported, not failed: the machine is shared and small): left streaming: "
            + "; ".join(summary["notes"])
            + ". Reasons: "
            + "; ".join(reasons)
            + "."
        )
    return f"""
### Soak: {summary["executors"]} executors, one server, {summary["window_s"] / 60:.1f} minutes

One `policy_server_node` (ACT, 6 joints, one 96x128 camera, chunks of 50, on the CPU) and
{summary["executors"]}
`chunk_executor_node`s at 30 Hz (`buffer_time_s` {BUFFER_TIME_S:g}, `request_timeout_s`
{REQUEST_TIMEOUT_S:g}), each with
its stand-in driver (joint states and a JPEG camera at 30 Hz), all separate processes on this
machine, streaming
for a {summary["window_s"]:.0f} s window after every executor had merged two chunks. Load average
(1 min) at the
end of the window: {summary["load_average"]:.1f}. Result: {verdict}

**Memory** (RSS, MB, sampled every {args.sample_s:g} s over the window; the slope is a
least-squares fit over
its second half):

| node | start | end | growth | max | second half, MB/min |
|---|---|---|---|---|---|
{memory_rows}

**Executors over the window** (counter deltas; `states` counts entries into each state):

{stream_header}
|---|---|---|---|---|---|---|---|---|---|
{stream_rows}

**Heartbeat**: {beats["received"]} received in the window, {beats["missed"]} missed (sequence
gaps),
{beats["out_of_order"]} out of order, longest interval {beats["max_interval_s"]} s (period 0.5 s).

**Sessions and topics**: while streaming the server held {summary["sessions_streaming"]} sessions
and
{summary["server_endpoints_streaming"]} data-plane endpoints (one observation subscription and one
chunk
publisher per executor). Then {(summary["executors"] + 1) // 2} executor(s) were stopped with
SIGINT (closing their
sessions) and {summary["executors"] // 2} killed with SIGKILL (left to the server's
{IDLE_TIMEOUT_S:g} s idle timeout;
they had been paused, so sent nothing): {summary["sessions_after"]} sessions and
{summary["server_endpoints_after"]} endpoints remained
{summary["s_to_collect_after_executors_left"]} s later.

**Audit** (counted with every executor paused, so no request was in flight; over the whole run):
every request sent is one audit line, or was superseded in its mailbox and counted in the next
line.
The server's own counters: {summary["server_requests_counted"]} requests, audit log
{summary["audit_lines_total"]} lines.

{audit_header}
|---|---|---|---|---|---|---|---|
{audit_rows}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the measured window")
    parser.add_argument("--executors", type=int, default=4)
    parser.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    parser.add_argument(
        "--checkpoint",
        default="",
        help="policy to serve (default: the generated ACT default policy)",
    )
    parser.add_argument(
        "--max-rss-growth-mb",
        type=float,
        default=30.0,
        help="fail when a node grows more over the window",
    )
    parser.add_argument(
        "--document", default=str(RELIABILITY_MD), help="where the results section is written"
    )
    parser.add_argument(
        "--output-dir", default="", help="logs and audit log (default: a new temporary directory)"
    )
    args = parser.parse_args()
    outside_load.watch()
    summary, problems = run(args)
    command = f"python -m bench.soak --minutes {args.minutes:g}"
    write_section("soak", command, render(summary, args), document=Path(args.document))
    print(json.dumps(summary, default=str))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
