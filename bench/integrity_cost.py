"""What the data plane MAC costs per message (data_plane/integrity.py), next to what the message
costs anyway.

Builds real Observation messages of three 480x640 cameras, JPEG (quality 90,
a camera-like image) and raw rgb8, and a real ActionChunk (50 x 6), and
times on this machine, per message: signing, verifying, and for scale
serialising the message as rclpy does on publish. Median of ``--repeats``
runs after a warm-up.

usage: python -m bench.integrity_cost [--repeats 200]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from rclpy.serialization import serialize_message

from bench import outside_load
from bench.report import write_section
from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import (
    ChunkReply,
    OutgoingObservation,
    RequestId,
    chunk_to_msg,
    integrity,
    observation_to_msg,
)

CAMERAS = ("observation.images.front", "observation.images.wrist", "observation.images.side")
HEIGHT, WIDTH = 480, 640


def camera_image(seed: int) -> np.ndarray:
    """Smooth gradients plus sensor noise: JPEG sizes like a real camera's, not a flat frame's."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:HEIGHT, 0:WIDTH]
    base = np.stack(
        [(x * 255 // WIDTH), (y * 255 // HEIGHT), ((x + y) * 255 // (WIDTH + HEIGHT))], axis=-1
    )
    return np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)


def observation(kind: str):
    request = RequestId("0123456789abcdef", "arm_1", 7, 0, 0, time.monotonic_ns())
    frames = [camera_image(seed) for seed in range(len(CAMERAS))]
    if kind == "jpeg":
        compressed = {
            name: images.rgb_to_compressed(frame, 90)
            for name, frame in zip(CAMERAS, frames, strict=False)
        }
        return observation_to_msg(
            OutgoingObservation(request, "", np.zeros(6, np.float32), compressed, {})
        )
    raw = {name: images.rgb_to_raw(frame) for name, frame in zip(CAMERAS, frames, strict=False)}
    return observation_to_msg(OutgoingObservation(request, "", np.zeros(6, np.float32), {}, raw))


def chunk():
    reply = ChunkReply(
        request=RequestId("0123456789abcdef", "arm_1", 7, 0, 0, 1),
        status=ActionChunk.STATUS_OK,
        model_fingerprint="f" * 16,
        action_names=tuple(f"joint_{i}" for i in range(6)),
    )
    reply.actions_model = reply.actions_robot = np.zeros((50, 6), np.float32)
    return chunk_to_msg(reply)


def median_ms(action, repeats: int) -> float:
    for _ in range(5):
        action()
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument(
        "--no-write",
        action="store_true",
        help="print only; leave docs/reference/benchmarks.md alone",
    )
    args = parser.parse_args()
    outside_load.watch()
    key = integrity.session_key(integrity.new_secret())
    rows = []
    for label, msg in (
        ("Observation, 3 x 480x640 JPEG q90", observation("jpeg")),
        ("Observation, 3 x 480x640 raw rgb8", observation("raw")),
        ("ActionChunk, 50 x 6", chunk()),
    ):
        integrity.sign(msg, key)
        size = len(serialize_message(msg))
        sign = median_ms(lambda msg=msg: integrity.sign(msg, key), args.repeats)
        verify = median_ms(lambda msg=msg: integrity.verify(msg, key), args.repeats)
        serialise = median_ms(lambda msg=msg: serialize_message(msg), args.repeats)
        rows.append(
            f"| {label} | {size / 1e6:.3f} MB | {sign:.3f} | {verify:.3f} | {serialise:.3f} |"
        )
    body = "\n".join(
        [
            "HMAC-SHA256 keyed by the session secret over every field of the message "
            "(`lerobot_ros/protocol/wire/data_plane/integrity.py`), median per message; "
            "serialisation (what rclpy does on every "
            "publish anyway) for scale. The executor signs each observation and verifies each "
            "chunk; the server "
            "verifies each observation on arrival and signs each chunk.",
            "",
            "| message | serialised | sign (ms) | verify (ms) | serialise (ms) |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )
    if args.no_write:
        print(body)
    else:
        write_section("integrity_cost", "python -m bench.integrity_cost", body)


if __name__ == "__main__":
    main()
