"""A client that is not ours, written from docs/reference/protocol.md and the interface files,
against a real server.

It uses plain rclpy, the generated interfaces (lerobot_ros.msg,
lerobot_ros.srv) and the independent MAC (independent_mac.py, standard
library only); nothing else of lerobot_ros (checked below). Against the
suite's shared policy_server_node process (conftest.policy_server): read the
contract with GetStatus, open a session, match the data plane, send signed
observations (JPEG frames encoded with OpenCV, a state vector), verify each
chunk's MAC and its echo, see that an observation with a wrong MAC and a
replayed seq are met with silence today, and close the session.
"""

from __future__ import annotations

import ast
import hmac
import json
import math
import sys
import time
from pathlib import Path

import cv2
import numpy as np
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import CompressedImage

sys.path.insert(0, str(Path(__file__).resolve().parent))
import independent_mac  # noqa: E402

from lerobot_ros.msg import ActionChunk, Observation  # noqa: E402
from lerobot_ros.srv import CloseSession, GetStatus, OpenSession  # noqa: E402
from support.ros import call_service, spin_until  # noqa: E402  (test infrastructure, not the product)

CLIENT_ID = "third_party_arm"
CALL_TIMEOUT_S = 20.0
MATCH_TIMEOUT_S = 10.0
CHUNK_TIMEOUT_S = 30.0
SILENCE_S = 0.5
# docs/reference/protocol.md, "Topics and QoS".
OBSERVATION_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
ACTION_CHUNK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=4,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
DEFINITIONS = independent_mac.Definitions()


def call(node, service_type, name: str, request):
    return call_service(node, service_type, name, request, CALL_TIMEOUT_S)


def values_of(msg, type_name: str) -> dict:
    """A message's fields as the plain values the MAC walk reads (what a C++ client walks in its
    struct)."""
    values = {}
    for field_type, name in DEFINITIONS.fields(type_name):
        value = getattr(msg, name)
        element, repeated = (
            field_type.element,
            field_type.sequence or field_type.fixed_size is not None,
        )
        if "/" in element:
            value = (
                [values_of(item, element) for item in value]
                if repeated
                else values_of(value, element)
            )
        elif repeated and element == "uint8":
            value = bytes(value)
        elif repeated:
            value = list(value)
        values[name] = value
    return values


def sign(msg: Observation, secret: str) -> None:
    msg.mac = independent_mac.mac(
        "lerobot_ros/msg/Observation", values_of(msg, "lerobot_ros/msg/Observation"), secret
    )


def jpeg(height: int, width: int, shade: int) -> CompressedImage:
    bgr = np.zeros((height, width, 3), np.uint8)
    bgr[:, :, 0], bgr[:, : width // 2, 2] = shade, 255 - shade
    ok, data = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])
    assert ok
    image = CompressedImage(format="jpeg")
    image.header.frame_id = "third_party_camera"
    image.data = data.tobytes()
    return image


def test_the_client_imports_only_the_generated_interfaces_of_the_package():
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    modules = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    modules |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    ours = {module for module in modules if module.split(".")[0] == "lerobot_ros"}
    assert ours == {"lerobot_ros.msg", "lerobot_ros.srv"}


def test_a_client_written_from_the_protocol_document_is_served(policy_server, ros_node):
    started = time.monotonic()
    node, namespace = ros_node, policy_server.namespace
    status = call(node, GetStatus, f"{namespace}/get_status", GetStatus.Request()).status
    capabilities = status.capabilities
    assert (
        status.ready
        and capabilities.schema_version_min
        <= Observation.CURRENT_SCHEMA_VERSION
        <= capabilities.schema_version_max
    )

    request = OpenSession.Request(
        client_id=CLIENT_ID,
        schema_version=Observation.CURRENT_SCHEMA_VERSION,
        action_names=list(capabilities.action_names),
        state_dim=capabilities.state_dim,
        camera_names=list(capabilities.camera_names),
        fps=capabilities.trained_fps or 30.0,
    )
    opened = call(node, OpenSession, f"{namespace}/open_session", request)
    assert opened.accepted, f"refusal {opened.refusal}: {opened.message}"
    assert opened.refusal == OpenSession.Response.REFUSAL_NONE and len(opened.session_secret) == 32
    assert opened.observation_topic == f"{namespace}/clients/{CLIENT_ID}/observation"
    assert opened.action_chunk_topic == f"{namespace}/clients/{CLIENT_ID}/action_chunk"
    secret, session_id = opened.session_secret, opened.session_id

    chunks: list[ActionChunk] = []
    publisher = node.create_publisher(Observation, opened.observation_topic, OBSERVATION_QOS)
    subscription = node.create_subscription(
        ActionChunk, opened.action_chunk_topic, chunks.append, ACTION_CHUNK_QOS
    )
    closed = False
    try:
        # Volatile topics: an observation published before both directions match is lost.
        assert spin_until(
            node,
            lambda: (
                publisher.get_subscription_count() >= 1 and subscription.get_publisher_count() >= 1
            ),
            MATCH_TIMEOUT_S,
        ), "data plane did not match"

        def observation(seq: int, shade: int) -> Observation:
            msg = Observation(
                schema_version=Observation.CURRENT_SCHEMA_VERSION,
                session_id=session_id,
                client_id=CLIENT_ID,
                seq=seq,
                episode=0,
                epoch=0,
                sent_monotonic_ns=time.monotonic_ns(),
                task="",
            )
            msg.state = [0.05 * (i + seq) for i in range(capabilities.state_dim)]
            names = list(capabilities.camera_names)
            msg.compressed_camera_names = names
            msg.compressed_images = [
                jpeg(h, w, shade)
                for h, w in zip(
                    capabilities.camera_heights, capabilities.camera_widths, strict=False
                )
            ]
            return msg

        def answer(seq: int, timeout_s: float):
            spin_until(node, lambda: any(chunk.seq == seq for chunk in chunks), timeout_s)
            return next((chunk for chunk in chunks if chunk.seq == seq), None)

        for seq in (1, 2, 3):  # one request in flight: the next leaves once this one is answered
            msg = observation(seq, shade=60 * seq)
            sign(msg, secret)
            publisher.publish(msg)
            chunk = answer(seq, CHUNK_TIMEOUT_S)
            assert chunk is not None, f"no chunk for seq {seq} within {CHUNK_TIMEOUT_S:g} s"
            chunk_values = values_of(chunk, "lerobot_ros/msg/ActionChunk")
            assert independent_mac.verify(
                "lerobot_ros/msg/ActionChunk", {**chunk_values, "mac": bytes(chunk.mac)}, secret
            ), "the chunk's MAC does not verify with the session secret"
            assert chunk.status == ActionChunk.STATUS_OK, chunk.error
            echoed = (
                chunk.session_id,
                chunk.client_id,
                chunk.seq,
                chunk.episode,
                chunk.epoch,
                chunk.sent_monotonic_ns,
            )
            assert echoed == (session_id, CLIENT_ID, seq, 0, 0, msg.sent_monotonic_ns)
            assert chunk.schema_version == Observation.CURRENT_SCHEMA_VERSION
            assert chunk.model_fingerprint == capabilities.model_fingerprint
            assert list(chunk.action_names) == list(
                capabilities.action_names
            ) and chunk.action_dim == len(chunk.action_names)
            assert 1 <= chunk.chunk_length and chunk.action_dim >= 1
            size = chunk.chunk_length * chunk.action_dim
            assert len(chunk.actions_robot) == len(chunk.actions_model) == size
            assert all(math.isfinite(x) for x in chunk.actions_robot)

        # Today a refusal on arrival is silence on the chunk topic: a wrong key (the hex-decoded
        # secret) ...
        forged = observation(10, shade=10)
        digest = hmac.new(
            bytes.fromhex(secret), independent_mac.DOMAIN + b"Observation\x00", "sha256"
        )
        independent_mac.feed_message(
            digest,
            "lerobot_ros/msg/Observation",
            values_of(forged, "lerobot_ros/msg/Observation"),
            DEFINITIONS,
            skip="mac",
        )
        forged.mac = digest.digest()
        count = len(chunks)

        def refusals():
            lines = policy_server.audit.read_text().splitlines()
            return {
                record["seq"]: record["error"]
                for record in map(json.loads, lines)
                if record.get("outcome") == "refused_on_arrival"
                and record.get("client") == CLIENT_ID
            }

        publisher.publish(forged)
        # What the operator sees: an audit line refused_on_arrival (and a throttled log warning).
        assert spin_until(node, lambda: 10 in refusals(), 5.0), refusals()
        # ... and a replayed seq (3 was admitted), correctly signed.
        replay = observation(3, shade=20)
        sign(replay, secret)
        publisher.publish(replay)
        assert spin_until(node, lambda: 3 in refusals(), 5.0), refusals()
        assert (
            "MAC does not verify" in refusals()[10] and "replays or reorders" in refusals()[3]
        ), refusals()
        # What the robot sees: nothing on its chunk topic.
        spin_until(node, lambda: len(chunks) > count, SILENCE_S)
        assert len(chunks) == count, (
            f"answered: {[(c.seq, c.status, c.error) for c in chunks[count:]]}"
        )
        # The session still works: a later seq is answered.
        msg = observation(11, shade=200)
        sign(msg, secret)
        publisher.publish(msg)
        chunk = answer(11, CHUNK_TIMEOUT_S)
        assert chunk is not None and chunk.status == ActionChunk.STATUS_OK

        close = CloseSession.Request(
            client_id=CLIENT_ID, session_id=session_id, session_secret=secret
        )
        response = call(node, CloseSession, f"{namespace}/close_session", close)
        closed = response.success
        assert closed, response.message
        again = call(node, CloseSession, f"{namespace}/close_session", close)
        assert not again.success and "has no open session" in again.message
    finally:
        if not closed:
            call(
                node,
                CloseSession,
                f"{namespace}/close_session",
                CloseSession.Request(
                    client_id=CLIENT_ID, session_id=session_id, session_secret=secret
                ),
            )
        node.destroy_publisher(publisher)
        node.destroy_subscription(subscription)
    print(f"third-party client: {time.monotonic() - started:.1f} s against the running server")
