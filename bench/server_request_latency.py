"""Where one request's time goes in policy_server_node (ACT, cameras at 480x640).

For 1 and 3 cameras, a server process serves an ACT checkpoint whose cameras
are 480x640; a client in this process sends one JPEG observation at a time
(q90 frames of a textured scene), waits for its chunk, and the split is read
from the chunk's server durations and the audit log:
  encode       client: JPEG-encode the frames and fill the message
  queue wait   server: observation deposited -> taken by the worker
  decode+pre   server: JPEG decode, validation, LeRobot preprocessing
  inference    server: predict_action_chunk
  post+publish server: postprocessing, chunk message, publish
  transport    round trip - everything the server measured (both directions, rclpy)
Medians and p95 over --requests requests per configuration.

usage: python bench/server_request_latency.py [--requests 40]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from report import write_section  # noqa: E402

os.environ.setdefault("ROS_DOMAIN_ID", str(1 + os.getpid() % 100))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np  # noqa: E402
import rclpy  # noqa: E402

from lerobot_ros import images  # noqa: E402
from lerobot_ros.data_plane import RequestId, observation_to_msg  # noqa: E402
from lerobot_ros.msg import ActionChunk, Observation  # noqa: E402
from lerobot_ros.processes import spawn_node, stop  # noqa: E402
from lerobot_ros.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS  # noqa: E402
from lerobot_ros.sim.default_policy import SO101_JOINT_NAMES, build_act_checkpoint  # noqa: E402
from lerobot_ros.srv import GetStatus, OpenSession  # noqa: E402
from lerobot_ros.wire import seconds_from_duration  # noqa: E402

HEIGHT, WIDTH = 480, 640


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def spin_until(node, predicate, timeout_s):
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        rclpy.spin_once(node, timeout_sec=0.01)
    return predicate()


def scene(seed: int) -> np.ndarray:
    """A textured frame (gradients + noise) so JPEG sizes are realistic (~50-90 KB at q90)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = np.stack([x * 255 // WIDTH, y * 255 // HEIGHT, (x + y) * 255 // (WIDTH + HEIGHT)], axis=-1)
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def measure(node, cameras: list[str], checkpoint: Path, requests: int, log_dir: Path) -> dict:
    namespace = f"/bench_{len(cameras)}cam"
    audit = log_dir / f"audit_{len(cameras)}.jsonl"
    with (log_dir / f"server_{len(cameras)}.log").open("w") as log:
        server = spawn_node(
            "lerobot_ros.server.node",
            {"checkpoint": str(checkpoint), "audit_log": str(audit), "device": "cpu"},
            log=log,
            node_name=namespace[1:],
        )
    try:
        status = node.create_client(GetStatus, f"{namespace}/get_status")
        deadline = time.monotonic() + 300
        while not status.wait_for_service(timeout_sec=0.5):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"server did not start:\n{(log_dir / f'server_{len(cameras)}.log').read_text()[-3000:]}")
        opener = node.create_client(OpenSession, f"{namespace}/open_session")
        future = opener.call_async(OpenSession.Request(
            client_id="bench", schema_version=Observation.CURRENT_SCHEMA_VERSION, action_names=list(SO101_JOINT_NAMES),
            state_dim=6, camera_names=cameras, fps=30.0))
        spin_until(node, future.done, 30)
        session = future.result()
        assert session.accepted, session.message
        chunks: list[ActionChunk] = []
        publisher = node.create_publisher(Observation, session.observation_topic, OBSERVATION_QOS)
        subscription = node.create_subscription(ActionChunk, session.action_chunk_topic, chunks.append, ACTION_CHUNK_QOS)
        spin_until(node, lambda: publisher.get_subscription_count() and subscription.get_publisher_count(), 10)
        frames = [scene(seed) for seed in range(8)]
        rows = []
        for seq in range(requests + 3):  # the first 3 are discarded as warm-up of the path
            started = time.perf_counter()
            compressed = {name: images.rgb_to_compressed(frames[(seq + i) % len(frames)], 90) for i, name in enumerate(cameras)}
            msg = observation_to_msg(RequestId(session.session_id, "bench", seq, 0, 0, time.monotonic_ns()), "",
                                     np.zeros(6, np.float32), compressed, {})
            encoded = time.perf_counter()
            publisher.publish(msg)
            if not spin_until(node, lambda: any(c.seq == seq for c in chunks), 30):
                raise RuntimeError(f"no chunk for request {seq}")
            received = time.perf_counter()
            chunk = next(c for c in chunks if c.seq == seq)
            assert chunk.status == ActionChunk.STATUS_OK, chunk.error
            durations = {name: seconds_from_duration(getattr(chunk, name)) for name in ("queue_wait", "preprocess", "inference", "postprocess")}
            rows.append({"encode": encoded - started, "round_trip": received - encoded, **durations,
                         "jpeg_bytes": sum(len(c.data) for c in compressed.values())})
        rows = rows[3:]
    finally:
        stop(server)
    publish = {r["seq"]: r["publish_ms"] / 1000 for r in map(json.loads, audit.read_text().splitlines())}
    for index, row in enumerate(rows):
        row["post_publish"] = row["postprocess"] + publish.get(index + 3, 0.0)
        row["transport"] = row["round_trip"] - row["queue_wait"] - row["preprocess"] - row["inference"] - row["post_publish"]
    return {key: [row[key] for row in rows] for key in rows[0]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    rclpy.init()
    node = rclpy.create_node("bench_server_request_latency")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for count in (1, 3):
            cameras = [f"observation.images.cam{i}" for i in range(count)]
            checkpoint = build_act_checkpoint(tmp / f"act_{count}", cameras={name: (HEIGHT, WIDTH) for name in cameras})
            results[count] = measure(node, cameras, checkpoint, args.requests, tmp)
    node.destroy_node()
    rclpy.shutdown()

    labels = [("encode", "client: JPEG encode + message"), ("queue_wait", "server: queue wait"),
              ("preprocess", "server: decode + validate + preprocess"), ("inference", "server: inference"),
              ("post_publish", "server: postprocess + publish"), ("transport", "transport up + down (rclpy)"),
              ("round_trip", "**round trip** (publish -> chunk received)")]
    lines = ["| stage | 1 camera median (p95) ms | 3 cameras median (p95) ms |", "|---|---|---|"]
    for key, label in labels:
        cells = [f"{statistics.median(results[n][key]) * 1000:.1f} ({percentile(results[n][key], 0.95) * 1000:.1f})" for n in (1, 3)]
        lines.append(f"| {label} | {cells[0]} | {cells[1]} |")
    overhead = [statistics.median([rt - inf for rt, inf in zip(results[n]["round_trip"], results[n]["inference"])]) * 1000 for n in (1, 3)]
    jpeg = [statistics.median(results[n]["jpeg_bytes"]) / 1024 for n in (1, 3)]
    body = f"""ACT (random weights, chunk 50 x 6) with its cameras at {HEIGHT}x{WIDTH}, served on the CPU; one request
in flight; JPEG q90 frames of a textured scene ({jpeg[0]:.0f} KiB per request with 1 camera, {jpeg[1]:.0f} KiB with 3).
{args.requests} requests per configuration, medians (p95).

{chr(10).join(lines)}

Overhead (round trip - inference), median: {overhead[0]:.1f} ms with 1 camera, {overhead[1]:.1f} ms with 3 cameras.
"""
    print(body)
    write_section("server_request_latency", f"python bench/server_request_latency.py --requests {args.requests}", body)


if __name__ == "__main__":
    main()
