"""Every size bound on what one observation may carry, and the check that applies them.

Invariant: an oversize observation is refused before anything in it is
decoded, compared, echoed or logged, and the refusal says what arrived and
what is accepted. The bounds are one frozen value, so the server's parser,
its request path and the camera decoders read the same numbers; the
defaults come from ``lerobot_ros.protocol.contract``, which bounds the session
declaration with the same constants.
"""

from __future__ import annotations

from dataclasses import dataclass

from lerobot_ros.msg import Observation
from lerobot_ros.protocol.contract import (
    MAX_ID_CHARS,
    MAX_IMAGE_BYTES,
    MAX_IMAGE_PIXELS,
    MAX_NAME_CHARS,
    MAX_NAMES,
    MAX_PREFIX_STEPS,
    MAX_STATE_DIM,
    MAX_TASK_CHARS,
    size_problem,
)
from lerobot_ros.protocol.wire.data_plane.fields import DataPlaneError


@dataclass(frozen=True)
class RequestLimits:
    """The bounds on one observation; the server's ``max_image_bytes`` parameter overrides its
    default."""

    max_image_bytes: int = MAX_IMAGE_BYTES
    max_image_pixels: int = MAX_IMAGE_PIXELS
    max_state_dim: int = MAX_STATE_DIM
    max_prefix_steps: int = MAX_PREFIX_STEPS
    max_task_chars: int = MAX_TASK_CHARS
    max_id_chars: int = MAX_ID_CHARS
    max_cameras: int = MAX_NAMES
    max_camera_name_chars: int = MAX_NAME_CHARS


def check_sizes(msg: Observation, limits: RequestLimits = RequestLimits()) -> None:
    """Raise DataPlaneError for an oversize observation, before anything in it is decoded, compared
    or echoed.

    Frame bytes and declared pixels are bounded where each frame is decoded
    (``cameras.frames_from_msg``), with these same limits.
    """
    if len(msg.state) > limits.max_state_dim:
        raise DataPlaneError(f"state has {len(msg.state)} values; at most {limits.max_state_dim}")
    for what, value, limit in (
        ("session_id", msg.session_id, limits.max_id_chars),
        ("client_id", msg.client_id, limits.max_id_chars),
        ("task", msg.task, limits.max_task_chars),
    ):
        problem = size_problem(what, value, limit)
        if problem:
            raise DataPlaneError(problem)
    cameras = len(msg.compressed_camera_names) + len(msg.raw_camera_names)
    frames = len(msg.compressed_images) + len(msg.raw_images)
    if max(cameras, frames) > limits.max_cameras:
        raise DataPlaneError(
            f"{cameras} camera names and {frames} frames arrived; at most {limits.max_cameras} "
            "cameras are accepted"
        )
    for name in (*msg.compressed_camera_names, *msg.raw_camera_names):
        problem = size_problem("a camera name", name, limits.max_camera_name_chars)
        if problem:
            raise DataPlaneError(problem)
    if msg.prefix_steps > limits.max_prefix_steps:
        raise DataPlaneError(
            f"prefix_steps is {msg.prefix_steps}; at most {limits.max_prefix_steps} accepted"
        )
