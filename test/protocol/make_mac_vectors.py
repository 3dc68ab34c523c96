"""Regenerate docs/reference/protocol_mac_vectors.json: the data plane MAC test vectors of
docs/reference/protocol.md.

    cd <repo> && .venv/bin/python test/protocol/make_mac_vectors.py

Each case below is built as the real generated message (lerobot_ros.msg and
the standard message packages), its values are written back from that
message (every field, so the file needs no default rules), and its expected
MAC is computed by the product, ``lerobot_ros.protocol.wire.data_plane.integrity.mac_of``,
on the message rebuilt from those very JSON values. The bytes the product
feeds the HMAC (after the key) are recorded too, as ``hashed_bytes_hex``, so an
implementer can diff its own walk byte by byte.

Run it once per change of the walk or of a signed message's definition (a new
schema version): test_mac_vectors.py checks the file against an implementation
written from the document alone, test_mac_product_agrees.py against the
product, so a file that either disagrees with fails.
"""

from __future__ import annotations

import hmac
import json
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from protocol_vectors import VECTORS, message_class, to_message, to_values  # noqa: E402

from lerobot_ros.protocol.wire.data_plane import integrity  # noqa: E402


def f32(x: float) -> float:
    """``x`` rounded to float32, as a Python float (exactly representable in float32)."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


FLOAT32_MAX = f32(3.4028234663852886e38)
FLOAT32_SUBNORMAL = f32(1.401298464324817e-45)  # the smallest positive float32
UINT64_MAX = (1 << 64) - 1
UINT32_MAX = (1 << 32) - 1
INT64_MIN = -(1 << 63)

JPEG_LIKE = bytes.fromhex("ffd8ffe000104a46494600010100000100010000ffdb0043000001020304ff00ffd9")
PNG_LIKE = (
    bytes.fromhex("89504e470d0a1a0a0000000d4948445200000002000000020806000000") + b"IEND\xaeB`\x82"
)

# Each case: name, what it covers, full type name, secret, the values set on a fresh message.
CASES = [
    {
        "name": "observation_every_field_kind",
        "description": (
            "An Observation using every field: seq = 2^64-1 (20 decimal digits), episode and "
            "epoch = 2^32-1, "
            "sent_monotonic_ns = -2^63 (a negative int64: a minus sign in the decimal text), a "
            "task in several "
            "scripts with a decomposed accent (hashed as sent, never normalised), a state with "
            "-0.0 (not 0.0), "
            "the float32 maximum and the smallest subnormal, two compressed frames and two raw "
            "frames with "
            "headers (negative and positive stamps, a non-ASCII frame_id), and an RTC prefix of 2 "
            "x 3."
        ),
        "type": "lerobot_ros/msg/Observation",
        "secret": "0123456789abcdef0123456789abcdef",
        "values": {
            "schema_version": 1,
            "session_id": "9f86d081884c7d65",
            "client_id": "so101_left",
            "seq": UINT64_MAX,
            "episode": UINT32_MAX,
            "epoch": UINT32_MAX,
            "sent_monotonic_ns": INT64_MIN,
            "task": "pick the red cube 🟥 and put it in the 箱 — cafe\u0301 ✓",
            "state": [0.0, -0.0, 1.5, -2.25, FLOAT32_MAX, FLOAT32_SUBNORMAL, f32(0.1)],
            "compressed_camera_names": ["observation.images.front", "observation.images.wrist"],
            "compressed_images": [
                {
                    "header": {
                        "stamp": {"sec": 1733300000, "nanosec": 999999999},
                        "frame_id": "front_camera",
                    },
                    "format": "jpeg",
                    "data": JPEG_LIKE.hex(),
                },
                {
                    "header": {"stamp": {"sec": -5, "nanosec": 0}, "frame_id": "poignet_caméra"},
                    "format": "rgb8; png compressed bgr8",
                    "data": PNG_LIKE.hex(),
                },
            ],
            "raw_camera_names": ["observation.images.top", "observation.images.depthless"],
            "raw_images": [
                {
                    "header": {"stamp": {"sec": 7, "nanosec": 123}, "frame_id": "top"},
                    "height": 2,
                    "width": 2,
                    "encoding": "rgb8",
                    "is_bigendian": 0,
                    "step": 6,
                    "data": bytes(range(12)).hex(),
                },
                {
                    "header": {"stamp": {"sec": 0, "nanosec": 0}, "frame_id": ""},
                    "height": 1,
                    "width": 3,
                    "encoding": "mono8",
                    "is_bigendian": 1,
                    "step": 4,
                    "data": "00ff7f80",
                },
            ],
            "inference_delay_steps": 3,
            "prefix_steps": 2,
            "prefix_model": [0.5, -0.5, 1.0, 2.0, -3.0, f32(1e-3)],
            "prefix_robot": [10.0, -20.0, 30.5, 0.0, f32(2.0 / 3.0), -1e6],
        },
    },
    {
        "name": "observation_as_the_executor_sends_it",
        "description": (
            "A typical request: one JPEG camera, a 6-value state, no RTC (prefix_steps 0, empty "
            "prefixes, "
            "empty raw lists), an empty task, a positive send time."
        ),
        "type": "lerobot_ros/msg/Observation",
        "secret": "5d41402abc4b2a76b9719d911017c592",
        "values": {
            "schema_version": 1,
            "session_id": "a1b2c3d4e5f60718",
            "client_id": "arm_1",
            "seq": 42,
            "episode": 3,
            "epoch": 1,
            "sent_monotonic_ns": 123456789012345,
            "task": "",
            "state": [0.0, -0.5, 0.25, 1.0, -1.0, 0.125],
            "compressed_camera_names": ["observation.images.front"],
            "compressed_images": [
                {
                    "header": {
                        "stamp": {"sec": 1733300001, "nanosec": 500000000},
                        "frame_id": "camera_front",
                    },
                    "format": "jpeg",
                    "data": JPEG_LIKE.hex(),
                },
            ],
        },
    },
    {
        "name": "observation_empty",
        "description": (
            "Every field at its default: empty strings (a length of 0 and no bytes), empty "
            "sequences (a count "
            "or byte length of 0), zeros (the one-character text '0'). Schema version 0."
        ),
        "type": "lerobot_ros/msg/Observation",
        "secret": "ffffffffffffffffffffffffffffffff",
        "values": {},
    },
    {
        "name": "action_chunk_ok",
        "description": (
            "An answer: the request header echoed (seq 2^64-2, sent_monotonic_ns -1), status 0 (a "
            "uint8: "
            "hashed as the text '0'), string[] action_names, 2 x 3 float32 arrays in both spaces, "
            "rtc_applied "
            "true, the four builtin_interfaces/Duration fields (one negative), load and batch "
            "fields."
        ),
        "type": "lerobot_ros/msg/ActionChunk",
        "secret": "0123456789abcdef0123456789abcdef",
        "values": {
            "schema_version": 1,
            "session_id": "9f86d081884c7d65",
            "client_id": "so101_left",
            "seq": UINT64_MAX - 1,
            "episode": 0,
            "epoch": 7,
            "sent_monotonic_ns": -1,
            "status": 0,
            "error": "",
            "model_fingerprint": "act:3f2a9c1e0b7d",
            "action_names": ["shoulder_pan", "shoulder_lift", "gripper"],
            "chunk_length": 2,
            "action_dim": 3,
            "actions_model": [0.25, -0.75, 1.0, 0.0, -0.0, f32(0.3)],
            "actions_robot": [12.5, -37.5, 50.0, 0.0, 100.0, FLOAT32_MAX],
            "rtc_applied": True,
            "inference_delay_steps": 4,
            "queue_wait": {"sec": 0, "nanosec": 1500000},
            "preprocess": {"sec": 0, "nanosec": 2750000},
            "inference": {"sec": 1, "nanosec": 5},
            "postprocess": {"sec": -1, "nanosec": 999999999},
            "superseded": 2,
            "active_sessions": 3,
            "max_sessions": 8,
            "pending_requests": 1,
            "batch_size": 2,
        },
    },
    {
        "name": "action_chunk_rejected",
        "description": (
            "A refusal: status 1 (STATUS_REJECTED) with a non-ASCII error text, no actions (empty "
            "arrays, "
            "chunk_length and action_dim 0), rtc_applied false, zero durations, batch_size 0."
        ),
        "type": "lerobot_ros/msg/ActionChunk",
        "secret": "5d41402abc4b2a76b9719d911017c592",
        "values": {
            "schema_version": 1,
            "session_id": "a1b2c3d4e5f60718",
            "client_id": "arm_1",
            "seq": 43,
            "episode": 3,
            "epoch": 1,
            "sent_monotonic_ns": 123456799012345,
            "status": 1,
            "error": "state has 4 values; the policy expects 6 — «rejected»",
            "model_fingerprint": "act:3f2a9c1e0b7d",
            "action_names": ["j1", "j2", "j3", "j4", "j5", "gripper"],
            "superseded": 0,
            "active_sessions": 1,
            "max_sessions": 4,
        },
    },
    {
        "name": "rule_coverage_server_capabilities",
        "description": (
            "Not signed on the wire (ServerCapabilities travels in OpenSession and ServerStatus): "
            "it exercises "
            "the walk's rules for a float32 scalar (trained_fps: 4 bytes little-endian, the value "
            "rounded to "
            "float32) and for a numeric sequence that is not float32 or uint8 (uint32[] "
            "camera_heights: byte "
            "length 4 x n, then the raw little-endian uint32 values)."
        ),
        "type": "lerobot_ros/msg/ServerCapabilities",
        "secret": "0123456789abcdef0123456789abcdef",
        "values": {
            "model_id": "lerobot/act_so101",
            "model_revision": "main",
            "model_fingerprint": "act:3f2a9c1e0b7d",
            "policy_type": "act",
            "serving_mode": "shared",
            "device": "cuda:0",
            "dtype": "bfloat16",
            "action_names": ["a", "b"],
            "state_names": [],
            "state_dim": 2,
            "camera_names": ["observation.images.front", "observation.images.wrist"],
            "camera_heights": [480, 96],
            "camera_widths": [640, UINT32_MAX],
            "chunk_size": 50,
            "trained_fps": f32(29.97),
            "rtc_supported": True,
            "rtc_enabled": False,
            "rtc_execution_horizon": 10,
            "schema_version_min": 1,
            "schema_version_max": 1,
            "pinned_task": "",
        },
    },
    {
        "name": "rule_coverage_task_status",
        "description": (
            "Not signed on the wire (sim_robot_node's telemetry): it exercises float64 scalars (8 "
            "bytes "
            "little-endian) and a fixed-size numeric array (float64[2] cube_px: byte length 16, "
            "then the raw "
            "doubles), a string constant in the .msg file (skipped), and a std_msgs/Header."
        ),
        "type": "lerobot_ros/msg/TaskStatus",
        "secret": "0123456789abcdef0123456789abcdef",
        "values": {
            "header": {"stamp": {"sec": 1733300002, "nanosec": 42}, "frame_id": "sim"},
            "task": "move the gripper to the cube and close it",
            "episode": 5,
            "phase": "RUNNING",
            "elapsed_s": 0.1,
            "distance_px": -12.345678901234567,
            "cube_px": [320.5, 1e-300],
            "expert_active": True,
            "successes": 2,
            "failures": 0,
        },
    },
]


class _Recorder:
    """Stands in for the HMAC object: keeps every byte the product's walk feeds it."""

    def __init__(self) -> None:
        self.data = bytearray()

    def update(self, chunk) -> None:
        self.data += bytes(chunk)


def hashed_bytes(msg) -> bytes:
    """What ``integrity.mac_of`` feeds the HMAC after the key: the domain prefix, then the field
    walk."""
    recorder = _Recorder()
    recorder.update(integrity._DOMAIN + type(msg).__name__.encode("ascii") + b"\x00")
    for name, field_type in integrity._fields(type(msg)):
        if name != integrity.MAC_FIELD:
            integrity._feed(recorder, getattr(msg, name), field_type)
    return bytes(recorder.data)


def build_case(case: dict) -> dict:
    cls = message_class(case["type"])
    values = to_values(to_message(case["type"], {**to_values(cls()), **case["values"]}))
    # The MAC of the message rebuilt from exactly what the file holds.
    msg = to_message(case["type"], json.loads(json.dumps(values)))
    key = integrity.session_key(case["secret"])
    mac = integrity.mac_of(msg, key)
    stream = hashed_bytes(msg)
    assert hmac.new(key, stream, "sha256").digest() == mac, (
        "the recorded walk is not what mac_of hashes"
    )
    return {
        "name": case["name"],
        "description": case["description"],
        "type": case["type"],
        "secret": case["secret"],
        "fields": values,
        "hashed_bytes_hex": stream.hex(),
        "mac": mac.hex(),
    }


def document() -> dict:
    return {
        "description": (
            "Test vectors of the lerobot_ros data plane MAC (docs/reference/protocol.md, section "
            "'The MAC, byte for byte'). "
            "For each case: mac = HMAC-SHA256(key = ASCII bytes of secret, message = "
            "hashed_bytes), where "
            "hashed_bytes is the domain prefix, the type's short name, a zero byte, then the walk "
            "of every field "
            "but mac. Generated by the product (test/protocol/make_mac_vectors.py); checked by "
            "test/protocol/test_mac_vectors.py (an implementation written from the document) and "
            "test/protocol/test_mac_product_agrees.py (the product)."
        ),
        "schema_version": 1,
        "domain_prefix_hex": integrity._DOMAIN.hex(),
        "value_encoding": {
            "message": "a JSON object by field name, in the .msg file's declaration order; every "
            "field but mac present",
            "uint8[]": "a hex string of the bytes",
            "float32[] / float64[N] / uint32[]": "a JSON array of numbers; float32 values are "
            "exactly representable in float32",
            "integers": "JSON integers (uint64 values up to 2^64-1 and int64 values down to "
            "-2^63: parse them as 64-bit integers)",
            "strings": "JSON strings (UTF-8 file)",
        },
        "cases": [build_case(case) for case in CASES],
    }


def main() -> None:
    text = json.dumps(document(), ensure_ascii=False, indent=2) + "\n"
    VECTORS.write_text(text, encoding="utf-8")
    print(f"wrote {len(CASES)} cases to {VECTORS}")


if __name__ == "__main__":
    main()
