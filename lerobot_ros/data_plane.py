"""Observation and ActionChunk messages <-> plain numpy values.

The one place that knows the data plane messages field by field, used by the
server (decode observations, encode chunks) and by the torch-free executor
(encode observations, decode chunks). Invariant: a message that is
structurally broken (misaligned name lists, arrays whose length disagrees
with their declared shape, corrupt images) never becomes a value; the error
says what was expected and what arrived. Float arrays are assigned as
``array.array``/``bytes`` and read with ``np.frombuffer``: rclpy iterates
numpy arrays element by element.
"""

from __future__ import annotations

import array
import dataclasses
from dataclasses import dataclass, field

import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros import images
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.wire import duration_from_seconds, seconds_from_duration


class DataPlaneError(ValueError):
    """A data plane message cannot be turned into values; the text says why."""


@dataclass(frozen=True)
class RequestId:
    """What identifies one request; a chunk echoes it untouched."""

    session_id: str
    client_id: str
    seq: int
    episode: int
    epoch: int
    sent_monotonic_ns: int


@dataclass
class ObservationFrame:
    """A decoded observation: RGB frames by camera name, float32 state."""

    request: RequestId
    schema_version: int
    task: str
    state: np.ndarray
    images: dict[str, np.ndarray]
    inference_delay_steps: int = 0
    prefix_model: np.ndarray | None = None  # [steps, action_dim]
    prefix_robot: np.ndarray | None = None


@dataclass
class ChunkReply:
    """A chunk (or a refusal) as the server produces it."""

    request: RequestId
    status: int
    error: str = ""
    model_fingerprint: str = ""
    action_names: tuple[str, ...] = ()
    actions_model: np.ndarray | None = None  # [chunk_length, action_dim]
    actions_robot: np.ndarray | None = None
    rtc_applied: bool = False
    inference_delay_steps: int = 0
    queue_wait_s: float = 0.0
    preprocess_s: float = 0.0
    inference_s: float = 0.0
    postprocess_s: float = 0.0
    superseded: int = 0
    active_sessions: int = 0
    max_sessions: int = 0
    pending_requests: int = 0


@dataclass
class ReceivedChunk:
    """A chunk as the executor reads it."""

    request: RequestId
    status: int
    error: str
    model_fingerprint: str
    action_names: tuple[str, ...]
    actions_model: np.ndarray
    actions_robot: np.ndarray
    rtc_applied: bool
    inference_delay_steps: int
    server_durations_s: dict[str, float] = field(default_factory=dict)
    superseded: int = 0


def request_id_of(msg: Observation | ActionChunk) -> RequestId:
    return RequestId(msg.session_id, msg.client_id, msg.seq, msg.episode, msg.epoch, msg.sent_monotonic_ns)


def _request_fields(request: RequestId) -> dict:
    """The header both data plane messages carry (a chunk echoes its observation's)."""
    return {"schema_version": Observation.CURRENT_SCHEMA_VERSION, **dataclasses.asdict(request)}


def _float_array(values, name: str) -> np.ndarray:
    # float32[] fields arrive as array.array('f'); a view, no copy.
    return np.frombuffer(values, dtype=np.float32) if len(values) else np.zeros(0, dtype=np.float32)


def _matrix(values, rows: int, columns: int, name: str) -> np.ndarray:
    flat = _float_array(values, name)
    if flat.size != rows * columns:
        raise DataPlaneError(f"{name} holds {flat.size} values; expected {rows} x {columns} = {rows * columns}")
    return flat.reshape(rows, columns)


def _aligned(names, frames, kind: str) -> None:
    if len(names) != len(frames):
        raise DataPlaneError(f"{len(names)} {kind} camera names but {len(frames)} {kind} images; they must be index-aligned")


def observation_from_msg(
    msg: Observation, action_dim: int, max_image_bytes: int | None = None, max_image_pixels: int | None = None
) -> ObservationFrame:
    """Decode an observation; images become RGB arrays."""
    _aligned(msg.compressed_camera_names, msg.compressed_images, "compressed")
    _aligned(msg.raw_camera_names, msg.raw_images, "raw")
    frames: dict[str, np.ndarray] = {}
    for name, image in [
        *zip(msg.compressed_camera_names, msg.compressed_images),
        *zip(msg.raw_camera_names, msg.raw_images),
    ]:
        if name in frames:
            raise DataPlaneError(f"camera {name!r} appears twice; each camera must be sent once")
        try:
            if isinstance(image, CompressedImage):
                frames[name] = images.compressed_to_rgb(image, max_bytes=max_image_bytes, max_pixels=max_image_pixels)
            else:
                if max_image_bytes is not None and len(image.data) > max_image_bytes:
                    raise images.ImageError(f"{len(image.data)} bytes; at most {max_image_bytes} are accepted")
                frames[name] = images.raw_to_rgb(image)
        except images.ImageError as error:
            raise DataPlaneError(f"camera {name!r}: {error}") from error
    prefix_model = prefix_robot = None
    if msg.prefix_steps:
        prefix_model = _matrix(msg.prefix_model, msg.prefix_steps, action_dim, "prefix_model")
        prefix_robot = _matrix(msg.prefix_robot, msg.prefix_steps, action_dim, "prefix_robot")
    return ObservationFrame(
        request=request_id_of(msg),
        schema_version=msg.schema_version,
        task=msg.task,
        state=_float_array(msg.state, "state"),
        images=frames,
        inference_delay_steps=msg.inference_delay_steps,
        prefix_model=prefix_model,
        prefix_robot=prefix_robot,
    )


def observation_to_msg(
    request: RequestId,
    task: str,
    state: np.ndarray,
    compressed: dict[str, CompressedImage],
    raw: dict[str, Image],
    inference_delay_steps: int = 0,
    prefix_model: np.ndarray | None = None,
    prefix_robot: np.ndarray | None = None,
) -> Observation:
    msg = Observation(
        **_request_fields(request),
        task=task,
        inference_delay_steps=inference_delay_steps,
    )
    msg.state = array.array("f", np.ascontiguousarray(state, dtype=np.float32).tobytes())
    msg.compressed_camera_names = list(compressed)
    msg.compressed_images = list(compressed.values())
    msg.raw_camera_names = list(raw)
    msg.raw_images = list(raw.values())
    if prefix_model is not None and prefix_robot is not None and len(prefix_model):
        msg.prefix_steps = len(prefix_model)
        msg.prefix_model = _float32_field(prefix_model)
        msg.prefix_robot = _float32_field(prefix_robot)
    return msg


def _float32_field(values: np.ndarray) -> array.array:
    result = array.array("f")
    result.frombytes(np.ascontiguousarray(values, dtype=np.float32).tobytes())
    return result


def chunk_to_msg(reply: ChunkReply) -> ActionChunk:
    request = reply.request
    msg = ActionChunk(
        **_request_fields(request),
        status=reply.status,
        error=reply.error,
        model_fingerprint=reply.model_fingerprint,
        action_names=list(reply.action_names),
        rtc_applied=reply.rtc_applied,
        inference_delay_steps=reply.inference_delay_steps,
        queue_wait=duration_from_seconds(reply.queue_wait_s),
        preprocess=duration_from_seconds(reply.preprocess_s),
        inference=duration_from_seconds(reply.inference_s),
        postprocess=duration_from_seconds(reply.postprocess_s),
        superseded=reply.superseded,
        active_sessions=reply.active_sessions,
        max_sessions=reply.max_sessions,
        pending_requests=reply.pending_requests,
    )
    if reply.actions_robot is not None and reply.actions_model is not None:
        if reply.actions_robot.shape != reply.actions_model.shape or reply.actions_robot.ndim != 2:
            raise DataPlaneError(
                f"model-space actions {reply.actions_model.shape} and robot-space actions "
                f"{reply.actions_robot.shape} must be equal 2-D shapes"
            )
        msg.chunk_length, msg.action_dim = reply.actions_robot.shape
        msg.actions_model = _float32_field(reply.actions_model)
        msg.actions_robot = _float32_field(reply.actions_robot)
    return msg


def chunk_from_msg(msg: ActionChunk) -> ReceivedChunk:
    """Decode a chunk; the arrays are checked against the declared shape."""
    if msg.action_dim and len(msg.action_names) != msg.action_dim:
        raise DataPlaneError(f"chunk names {len(msg.action_names)} actions but declares action_dim {msg.action_dim}")
    return ReceivedChunk(
        request=request_id_of(msg),
        status=msg.status,
        error=msg.error,
        model_fingerprint=msg.model_fingerprint,
        action_names=tuple(msg.action_names),
        actions_model=_matrix(msg.actions_model, msg.chunk_length, msg.action_dim, "actions_model"),
        actions_robot=_matrix(msg.actions_robot, msg.chunk_length, msg.action_dim, "actions_robot"),
        rtc_applied=msg.rtc_applied,
        inference_delay_steps=msg.inference_delay_steps,
        server_durations_s={
            name: seconds_from_duration(getattr(msg, name))
            for name in ("queue_wait", "preprocess", "inference", "postprocess")
        },
        superseded=msg.superseded,
    )
