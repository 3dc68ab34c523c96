"""Observation and ActionChunk messages <-> numpy (no ROS graph)."""

import threading
import time

import cv2
import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol import contract
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import (
    ChunkReply,
    DataPlaneError,
    OutgoingObservation,
    RequestId,
    RequestLimits,
    camera_payload,
    camera_payloads,
    cameras,
    chunk_from_msg,
    chunk_to_msg,
    observation_from_msg,
    observation_from_record,
    observation_record,
    observation_to_msg,
)

REQUEST = RequestId("session", "arm", 12, 3, 2, 123_456_789)


def frame(color):
    rgb = np.zeros((48, 64, 3), np.uint8)
    rgb[..., :] = color
    return rgb


def test_observation_round_trip_with_jpeg_raw_and_rtc_prefixes():
    prefix_model = np.arange(12, dtype=np.float32).reshape(2, 6)
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST,
            "pick",
            np.array([0.5, -1, 2, 0, 0, 1], np.float32),
            {"front": images.rgb_to_compressed(frame((255, 0, 0)), 95)},
            {"wrist": images.rgb_to_raw(frame((0, 0, 255)))},
            inference_delay_steps=4,
            prefix_model=prefix_model,
            prefix_robot=prefix_model * 2,
        )
    )
    decoded = observation_from_msg(msg, action_dim=6)
    assert decoded.request == REQUEST and decoded.task == "pick"
    assert decoded.state.tolist() == [0.5, -1, 2, 0, 0, 1]
    front, wrist = decoded.images["front"], decoded.images["wrist"]
    assert front[..., 0].mean() > 240 and front[..., 1:].mean() < 15  # red stays red
    assert (wrist == frame((0, 0, 255))).all()  # raw is exact, blue stays blue
    assert decoded.inference_delay_steps == 4
    np.testing.assert_array_equal(decoded.prefix_model, prefix_model)
    np.testing.assert_array_equal(decoded.prefix_robot, prefix_model * 2)


def test_misaligned_names_and_duplicate_cameras_are_refused():
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST, "", np.zeros(6), {"front": images.rgb_to_compressed(frame(0), 90)}, {}
        )
    )
    msg.compressed_camera_names = ["front", "wrist"]
    with pytest.raises(DataPlaneError, match="2 compressed camera names but 1 compressed images"):
        observation_from_msg(msg, 6)
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST,
            "",
            np.zeros(6),
            {"front": images.rgb_to_compressed(frame(0), 90)},
            {"front": images.rgb_to_raw(frame(0))},
        )
    )
    with pytest.raises(DataPlaneError, match="camera 'front' appears twice"):
        observation_from_msg(msg, 6)


def _many_cameras(count: int) -> tuple[dict, dict]:
    """``count`` cameras of distinct colours, JPEG and raw alternating: the message parts and the
    frames sent."""
    sent = {f"cam{i}": frame((40 * i, 255 - 40 * i, 100)) for i in range(count)}
    compressed = {
        name: images.rgb_to_compressed(rgb, 95)
        for i, (name, rgb) in enumerate(sent.items())
        if i % 2 == 0
    }
    raw = {
        name: images.rgb_to_raw(rgb) for i, (name, rgb) in enumerate(sent.items()) if i % 2 == 1
    }
    return (compressed, raw), sent


@pytest.fixture
def two_cores(monkeypatch):
    """Side-by-side decoding as on a machine with two usable cores, on a pool of this test's
    own."""
    monkeypatch.setattr(cameras, "_usable_cores", lambda: 2)
    monkeypatch.setattr(cameras, "_decode_pool", None)
    yield
    if cameras._decode_pool is not None:
        cameras._decode_pool.shutdown(wait=True)


def test_cameras_decoded_side_by_side_keep_their_names_sizes_and_pixels(two_cores):
    (compressed, raw), sent = _many_cameras(5)
    msg = observation_to_msg(OutgoingObservation(REQUEST, "", np.zeros(6), compressed, raw))
    sizes = {"cam1": (24, 32), "cam2": (24, 32)}
    decoded = observation_from_msg(msg, 6, policy_sizes=sizes).images
    assert list(decoded) == [*compressed, *raw]
    for name, rgb in sent.items():
        assert decoded[name].shape == (*sizes.get(name, (48, 64)), 3), name
        # each camera got its own frame
        assert np.abs(decoded[name].astype(int) - rgb[0, 0]).max() <= 3, name


def test_side_by_side_decodes_really_overlap(two_cores):
    # Each decode waits for the other at a barrier: decoded one after another, the barrier breaks.
    barrier = threading.Barrier(2, timeout=5.0)

    def decode(name, image):
        barrier.wait()
        return name

    assert cameras.decode_side_by_side(decode, [("a", None), ("b", None)]) == ["a", "b"]


def test_a_refusal_names_the_first_bad_camera_in_order_after_every_decode_ended(two_cores):
    (compressed, raw), _ = _many_cameras(3)
    for name in ("cam0", "cam2"):
        compressed[name].data = compressed[name].data[:100]  # truncated JPEGs
    msg = observation_to_msg(OutgoingObservation(REQUEST, "", np.zeros(6), compressed, raw))
    with pytest.raises(DataPlaneError, match="camera 'cam0': expected a complete JPEG"):
        observation_from_msg(msg, 6)
    finished = []

    def decode(name, image):
        if name == "first":
            raise DataPlaneError("first is bad")
        time.sleep(0.05)
        finished.append(name)
        return name

    with pytest.raises(DataPlaneError, match="first is bad"):
        cameras.decode_side_by_side(decode, [("first", None), ("slow", None)])
    assert finished == ["slow"]  # nothing still reads the message once the request is answered


def test_prefix_length_must_match_its_declared_shape():
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST,
            "",
            np.zeros(6),
            {},
            {},
            prefix_model=np.zeros((2, 6)),
            prefix_robot=np.zeros((2, 6)),
        )
    )
    msg.prefix_steps = 3
    with pytest.raises(DataPlaneError, match="prefix_model holds 12 values; expected 3 x 6 = 18"):
        observation_from_msg(msg, 6)


def test_oversize_raw_frame_is_refused():
    msg = observation_to_msg(
        OutgoingObservation(REQUEST, "", np.zeros(6), {}, {"front": images.rgb_to_raw(frame(0))})
    )
    with pytest.raises(DataPlaneError, match="9216 bytes; at most 1000"):
        observation_from_msg(msg, 6, RequestLimits(max_image_bytes=1000))


def test_chunk_round_trip_keeps_both_spaces_ids_and_durations():
    model = np.random.default_rng(0).normal(size=(50, 6)).astype(np.float32)
    reply = ChunkReply(
        REQUEST,
        ActionChunk.STATUS_OK,
        model_fingerprint="f" * 16,
        action_names=tuple("abcdef"),
        actions_model=model,
        actions_robot=model * 0.3 + 1,
        queue_wait_s=0.002,
        inference_s=0.031,
        superseded=2,
        active_sessions=1,
        max_sessions=8,
    )
    msg = chunk_to_msg(reply)
    assert (msg.chunk_length, msg.action_dim) == (50, 6)
    chunk = chunk_from_msg(msg)
    assert (
        chunk.request == REQUEST and chunk.superseded == 2 and chunk.model_fingerprint == "f" * 16
    )
    np.testing.assert_array_equal(chunk.actions_model, model)
    np.testing.assert_array_equal(chunk.actions_robot, model * 0.3 + 1)
    assert chunk.server_durations_s["inference"] == pytest.approx(0.031)


def test_chunk_arrays_must_match_the_declared_shape():
    msg = chunk_to_msg(
        ChunkReply(
            REQUEST,
            0,
            action_names=tuple("abcdef"),
            actions_model=np.zeros((5, 6)),
            actions_robot=np.zeros((5, 6)),
        )
    )
    msg.chunk_length = 6
    with pytest.raises(DataPlaneError, match="actions_model holds 30 values; expected 6 x 6 = 36"):
        chunk_from_msg(msg)
    with pytest.raises(DataPlaneError, match="must be equal 2-D shapes"):
        chunk_to_msg(
            ChunkReply(REQUEST, 0, actions_model=np.zeros((5, 6)), actions_robot=np.zeros((4, 6)))
        )


def test_camera_payload_forwards_jpeg_and_encodes_raw():
    rgb = np.random.default_rng(0).integers(0, 255, (12, 16, 3), dtype=np.uint8)
    jpeg = images.rgb_to_compressed(rgb, 90)
    assert camera_payload(jpeg, 90) == ("compressed", jpeg)  # the same object: not re-encoded
    kind, encoded = camera_payload(images.rgb_to_raw(rgb), 80)
    assert kind == "compressed" and images.is_jpeg(encoded)
    raw = images.rgb_to_raw(rgb)
    assert camera_payload(raw, 0) == ("raw", raw)
    assert camera_payload(jpeg, 0) == ("compressed", jpeg), (
        "JPEG inputs are forwarded whatever the quality"
    )
    bgr = images.rgb_to_raw(rgb)
    bgr.encoding = "bgr8"
    kind, converted = camera_payload(bgr, 0)
    assert (
        kind == "raw"
        and converted.encoding == "rgb8"
        and (converted.height, converted.width) == (12, 16)
    )
    png = CompressedImage(format="png", data=cv2.imencode(".png", rgb)[1].tobytes())
    kind, encoded = camera_payload(png, 80)
    assert kind == "compressed" and images.is_jpeg(encoded), "a PNG frame leaves as JPEG"


def test_camera_payloads_split_frames_into_compressed_and_raw_by_name():
    jpeg, raw = images.rgb_to_compressed(frame(0), 90), images.rgb_to_raw(frame(0))
    compressed, raws = camera_payloads({"front": jpeg, "wrist": raw}, 0)
    assert compressed == {"front": jpeg} and raws == {"wrist": raw}


def test_every_size_bound_comes_from_one_limits_value():
    defaults = RequestLimits()
    assert (
        defaults.max_image_bytes,
        defaults.max_image_pixels,
        defaults.max_camera_name_chars,
    ) == (contract.MAX_IMAGE_BYTES, contract.MAX_IMAGE_PIXELS, contract.MAX_NAME_CHARS)
    name = "x" * 40
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST, "", np.zeros(6), {name: images.rgb_to_compressed(frame(0), 90)}, {}
        )
    )
    assert set(observation_from_msg(msg, 6).images) == {name}
    with pytest.raises(
        DataPlaneError, match="a camera name is 40 characters long; at most 32 are accepted"
    ):
        observation_from_msg(msg, 6, RequestLimits(max_camera_name_chars=32))
    size = len(msg.compressed_images[0].data)
    with pytest.raises(
        DataPlaneError,
        match=f"camera '{name}': expected a compressed image of at most {size - 1} bytes, got "
        f"{size}",
    ):
        observation_from_msg(msg, 6, RequestLimits(max_image_bytes=size - 1))
    with pytest.raises(
        DataPlaneError, match="expected an image of at most 100 pixels, got a JPEG declaring 48x64"
    ):
        observation_from_msg(msg, 6, RequestLimits(max_image_pixels=100))
    with pytest.raises(DataPlaneError, match="state has 6 values; at most 5"):
        observation_from_msg(msg, 6, RequestLimits(max_state_dim=5))


def test_an_observation_record_rebuilds_the_message_the_robot_sent():
    prefix_model = np.arange(12, dtype=np.float32).reshape(2, 6)
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST,
            "pick",
            np.array([0.5, -1, 2, 0, 0, 1], np.float32),
            {"front": images.rgb_to_compressed(frame((255, 0, 0)), 95)},
            {"wrist": images.rgb_to_raw(frame((0, 0, 255)))},
            inference_delay_steps=4,
            prefix_model=prefix_model,
            prefix_robot=prefix_model + 1,
        )
    )
    parsed = observation_from_msg(msg, 6)
    rebuilt = observation_from_record(
        observation_record(msg, parsed.prefix_model, parsed.prefix_robot)
    )
    for field in (
        "schema_version",
        "session_id",
        "client_id",
        "seq",
        "episode",
        "epoch",
        "task",
        "compressed_camera_names",
        "raw_camera_names",
        "inference_delay_steps",
    ):
        assert getattr(rebuilt, field) == getattr(msg, field), field
    assert bytes(rebuilt.state) == bytes(msg.state)
    assert [bytes(image.data) for image in rebuilt.compressed_images] == [
        bytes(image.data) for image in msg.compressed_images
    ]
    assert [
        (image.encoding, image.height, image.width, image.step, bytes(image.data))
        for image in rebuilt.raw_images
    ] == [
        (image.encoding, image.height, image.width, image.step, bytes(image.data))
        for image in msg.raw_images
    ]
    again = observation_from_msg(rebuilt, 6)
    np.testing.assert_array_equal(again.prefix_model, prefix_model)
    np.testing.assert_array_equal(again.prefix_robot, prefix_model + 1)


def test_a_camera_with_a_policy_size_comes_back_at_it_and_the_others_as_they_arrived():
    msg = observation_to_msg(
        OutgoingObservation(
            REQUEST,
            "",
            np.zeros(6),
            {
                "front": images.rgb_to_compressed(frame((255, 0, 0)), 95),
                "side": images.rgb_to_compressed(frame(9), 95),
            },
            {"wrist": images.rgb_to_raw(frame((0, 0, 255)))},
        )
    )
    decoded = observation_from_msg(msg, 6, RequestLimits(), {"front": (12, 16), "wrist": (12, 16)})
    assert (
        decoded.images["front"].shape == (12, 16, 3)
        and decoded.images["front"][..., 0].mean() > 240
    )
    assert decoded.images["side"].shape == (48, 64, 3)  # no size asked: full size
    assert (
        decoded.images["wrist"].shape == (12, 16, 3)
        and decoded.images["wrist"][..., 2].min() == 255
    )


def _scene(height, width):
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack(
        [x * 255 // width, y * 255 // height, (x + y) * 255 // (width + height)], axis=-1
    )
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)


def test_a_frame_larger_than_the_policy_is_shrunk_before_encoding_and_one_at_its_size_is_forwarded():  # noqa: E501 - the test's id names what it checks
    full = _scene(480, 640)
    kind, payload = camera_payload(images.rgb_to_raw(full), 90, (96, 128))
    assert kind == "compressed" and images.compressed_to_rgb(payload).shape == (96, 128, 3)
    kind, payload = camera_payload(images.rgb_to_raw(full), 0, (96, 128))
    assert kind == "raw" and (payload.height, payload.width) == (96, 128)
    jpeg = images.rgb_to_compressed(full, 90)
    kind, payload = camera_payload(jpeg, 90, (96, 128))
    assert (
        kind == "compressed"
        and payload is not jpeg
        and images.compressed_to_rgb(payload).shape == (96, 128, 3)
    )
    # the policy's own size: forwarded untouched
    assert camera_payload(jpeg, 90, (480, 640))[1] is jpeg
    assert camera_payload(jpeg, 90, (960, 1280))[1] is jpeg  # never enlarged on the robot
    # larger in one dimension: the server resizes
    assert camera_payload(jpeg, 90, (240, 960))[1] is jpeg
    assert camera_payload(jpeg, 90, None)[1] is jpeg


def test_the_policy_sees_the_same_pixels_whichever_end_resizes():
    """Robot-side shrink + JPEG vs full-size JPEG + server-side shrink: within JPEG error (mean < 3
    levels, p99 < 16)."""
    full = _scene(480, 640)
    robot_side = observation_to_msg(
        OutgoingObservation(
            REQUEST,
            "",
            np.zeros(6),
            *camera_payloads({"cam": images.rgb_to_raw(full)}, 90, {"cam": (96, 128)}),
        )
    )
    server_side = observation_to_msg(
        OutgoingObservation(
            REQUEST, "", np.zeros(6), *camera_payloads({"cam": images.rgb_to_raw(full)}, 90)
        )
    )
    sizes = {"cam": (96, 128)}
    a = observation_from_msg(robot_side, 6, RequestLimits(), sizes).images["cam"].astype(np.int16)
    b = observation_from_msg(server_side, 6, RequestLimits(), sizes).images["cam"].astype(np.int16)
    assert a.shape == b.shape == (96, 128, 3)
    difference = np.abs(a - b)
    assert difference.mean() < 3 and np.percentile(difference, 99) < 16
    assert len(robot_side.compressed_images[0].data) * 8 < len(
        server_side.compressed_images[0].data
    )
