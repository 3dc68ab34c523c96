"""The data plane MAC: every field counts, the wire round trip verifies, the key and type matter
(no ROS graph)."""

import numpy as np
import pytest
from rclpy.serialization import deserialize_message, serialize_message

from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import (
    ChunkReply,
    OutgoingObservation,
    RequestId,
    chunk_to_msg,
    integrity,
    observation_to_msg,
)

KEY = integrity.session_key(integrity.new_secret())


def an_observation() -> Observation:
    request = RequestId("s1", "arm", 7, 2, 1, 123456789)
    frame = images.rgb_to_compressed(np.full((48, 64, 3), 90, np.uint8), 90)
    msg = observation_to_msg(
        OutgoingObservation(
            request,
            "pick",
            np.arange(6, dtype=np.float32),
            {"observation.images.front": frame},
            {},
        )
    )
    msg.raw_camera_names, msg.raw_images = (
        ["observation.images.side"],
        [images.rgb_to_raw(np.zeros((4, 5, 3), np.uint8))],
    )
    msg.prefix_steps, msg.prefix_model, msg.prefix_robot = 1, [0.1] * 6, [0.2] * 6
    return msg


def a_chunk() -> ActionChunk:
    reply = ChunkReply(
        request=RequestId("s1", "arm", 7, 2, 1, 123456789),
        status=ActionChunk.STATUS_OK,
        model_fingerprint="fp",
        action_names=tuple(f"j{i}" for i in range(6)),
    )
    reply.actions_model = reply.actions_robot = np.full((4, 6), 0.3, np.float32)
    return chunk_to_msg(reply)


@pytest.mark.parametrize("build", [an_observation, a_chunk], ids=["observation", "chunk"])
def test_a_signed_message_verifies_after_crossing_the_wire(build):
    msg = build()
    integrity.sign(msg, KEY)
    assert integrity.verify(msg, KEY) is None
    received = deserialize_message(serialize_message(msg), type(msg))
    assert integrity.verify(received, KEY) is None


def mutate(msg, name: str, type_name: str) -> None:
    """Change one top-level field in place, the way a forger would."""
    value = getattr(msg, name)
    if isinstance(value, str):
        setattr(msg, name, value + "x")
    elif isinstance(value, bool):
        setattr(msg, name, not value)
    elif isinstance(value, int):
        setattr(msg, name, value + 1)
    elif type_name in ("sequence<float>", "sequence<uint8>"):
        setattr(msg, name, list(value) + [9])
    elif type_name == "sequence<string>":
        setattr(msg, name, list(value) + ["extra"])
    elif type_name.startswith("sequence<"):  # camera frames: one pixel byte
        value[0].data[0] ^= 1
    else:  # a nested message (Duration)
        value.sec += 1


@pytest.mark.parametrize("build", [an_observation, a_chunk], ids=["observation", "chunk"])
def test_changing_any_field_breaks_the_mac(build):
    fields = {
        name: kind
        for name, kind in type(build()).get_fields_and_field_types().items()
        if name != integrity.MAC_FIELD
    }
    for name, type_name in fields.items():
        msg = build()
        integrity.sign(msg, KEY)
        mutate(msg, name, type_name)
        assert integrity.verify(msg, KEY) is not None, f"changing {name} kept the MAC valid"


def test_another_key_a_missing_mac_and_the_other_message_type_fail():
    msg = a_chunk()
    integrity.sign(msg, KEY)
    assert "does not verify" in integrity.verify(
        msg, integrity.session_key(integrity.new_secret())
    )
    assert integrity.verify(a_chunk(), KEY) == (
        "ActionChunk carries a 0-byte MAC; expected 32 bytes keyed by the session secret"
    )
    assert integrity.mac_of(Observation(), KEY) != integrity.mac_of(ActionChunk(), KEY), (
        "the type is part of the MAC"
    )
