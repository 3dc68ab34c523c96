"""Camera frames in an Observation, both ways: payloads out, bounded RGB arrays in.

Invariants: a complete JPEG is forwarded untouched (never re-encoded);
anything else leaves as JPEG or raw rgb8, never in an encoding the server
would have to guess. On the way in, the name lists are index-aligned with
the frames, each camera comes once, and every frame is decoded within the
byte and pixel bounds of ``RequestLimits``, or refused naming the camera,
what was expected and what arrived.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait

import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.msg import Observation
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane.fields import DataPlaneError
from lerobot_ros.protocol.wire.data_plane.limits import RequestLimits

Payload = Image | CompressedImage


def _larger_than(size: tuple[int, int] | None, target: tuple[int, int]) -> bool:
    return size is not None and size != target and size[0] >= target[0] and size[1] >= target[1]


def camera_payload(
    msg: Payload, jpeg_quality: int, policy_size: tuple[int, int] | None = None
) -> tuple[str, Payload]:
    """("compressed" | "raw", message) to put in an Observation for one camera frame.

    A frame larger than ``policy_size`` (height, width; the resolution the
    policy was trained at) in both dimensions is shrunk to it first, with the
    resize the server would apply (``images.frame_at_size``), then encoded as
    below. Otherwise a complete JPEG is forwarded untouched (no re-encoding);
    anything else is decoded to RGB and sent as JPEG at ``jpeg_quality``, or
    as raw rgb8 when ``jpeg_quality`` is 0. Raises images.ImageError for an
    unusable frame.
    """
    if policy_size is not None and _larger_than(images.frame_size(msg), policy_size):
        rgb = images.frame_at_size(msg, policy_size)
    elif isinstance(msg, CompressedImage):
        compressed = images.CompressedFrame.of(msg)
        if compressed.is_complete_jpeg():
            return "compressed", msg
        rgb = compressed.to_rgb()
    elif (
        jpeg_quality == 0
        and isinstance(msg, Image)
        and msg.encoding == "rgb8"
        and msg.step == msg.width * 3
    ):
        return "raw", msg
    else:
        rgb = images.image_message_to_rgb(msg)
    if jpeg_quality == 0:
        return "raw", images.rgb_to_raw(rgb)
    return "compressed", images.rgb_to_compressed(rgb, jpeg_quality)


def camera_payloads(
    frames: dict[str, Payload],
    jpeg_quality: int,
    policy_sizes: dict[str, tuple[int, int]] | None = None,
) -> tuple[dict[str, CompressedImage], dict[str, Image]]:
    """(compressed, raw) payloads by camera name for ``observation_to_msg``; see
    ``camera_payload``.

    ``policy_sizes``: the policy's (height, width) per camera; a camera not in it is never resized.
    """
    compressed, raw = {}, {}
    policy_sizes = policy_sizes or {}
    for name, frame in frames.items():
        kind, payload = camera_payload(frame, jpeg_quality, policy_sizes.get(name))
        (compressed if kind == "compressed" else raw)[name] = payload
    return compressed, raw


def _aligned(names, frames, kind: str) -> None:
    if len(names) != len(frames):
        raise DataPlaneError(
            f"{len(names)} {kind} camera names but {len(frames)} {kind} images; they must be "
            "index-aligned"
        )


def frames_from_msg(
    msg: Observation, limits: RequestLimits, policy_sizes: dict[str, tuple[int, int]] | None = None
) -> dict[str, np.ndarray]:
    """Every camera frame of ``msg`` as an HxWx3 uint8 RGB array, by camera name.

    ``policy_sizes`` maps a camera to the (height, width) the policy was trained
    at: that camera comes back at exactly that size (``images.frame_at_size``:
    a JPEG decoded at a reduced DCT scale where it allows, resized in uint8);
    other cameras come at the size they arrived. Several cameras are decoded
    side by side (``decode_side_by_side``); a refusal names the first bad
    camera in the message's order, whichever finished first.
    """
    policy_sizes = policy_sizes or {}
    _aligned(msg.compressed_camera_names, msg.compressed_images, "compressed")
    _aligned(msg.raw_camera_names, msg.raw_images, "raw")
    named = [
        *zip(msg.compressed_camera_names, msg.compressed_images, strict=False),
        *zip(msg.raw_camera_names, msg.raw_images, strict=False),
    ]
    seen: set[str] = set()
    for name, _ in named:
        if name in seen:
            raise DataPlaneError(f"camera {name!r} appears twice; each camera must be sent once")
        seen.add(name)

    def decode(name: str, image: Payload) -> np.ndarray:
        try:
            size = policy_sizes.get(name)
            if size is None:
                return images.image_message_to_rgb(
                    image, limits.max_image_bytes, limits.max_image_pixels
                )
            return images.frame_at_size(
                image, size, limits.max_image_bytes, limits.max_image_pixels
            )
        except images.ImageError as error:
            raise DataPlaneError(f"camera {name!r}: {error}") from error

    return dict(zip((name for name, _ in named), decode_side_by_side(decode, named), strict=False))


_decode_pool: ThreadPoolExecutor | None = None
_decode_pool_lock = threading.Lock()


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))  # a container's or taskset's share, not the host's
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def decode_side_by_side(
    decode: Callable[[str, Payload], np.ndarray], named: list[tuple[str, Payload]]
) -> list[np.ndarray]:
    """``decode(name, image)`` for each pair, in order, on up to one thread per usable core.

    OpenCV's JPEG decoder and resize release the GIL, so three 480x640 frames
    take about 1.4x less time on two cores than one after another. The
    calling thread decodes the first frame itself. Every decode has finished
    before this returns or raises, so nothing still reads the message once its
    request is answered; the exception raised is the first camera's in order.
    """
    if len(named) < 2 or _usable_cores() < 2:
        return [decode(name, image) for name, image in named]
    pool = _shared_pool()
    futures = [pool.submit(decode, name, image) for name, image in named[1:]]
    try:
        first = decode(*named[0])
    finally:
        wait(futures)
    return [first, *(future.result() for future in futures)]


def _shared_pool() -> ThreadPoolExecutor:
    global _decode_pool
    with _decode_pool_lock:
        if _decode_pool is None:
            # The calling thread decodes one frame too: with it, as many decodes at once as cores.
            _decode_pool = ThreadPoolExecutor(
                max_workers=max(1, min(_usable_cores(), 8) - 1),
                thread_name_prefix="lerobot_ros-decode",
            )
        return _decode_pool
