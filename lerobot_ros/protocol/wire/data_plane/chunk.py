"""The ActionChunk message from the server's reply (server side) and back (executor side).

Invariant: a chunk leaves the server only with model- and robot-space
actions of one 2-D shape, and reaches the executor as a ``ReceivedChunk``
only when its arrays hold exactly the declared chunk_length x action_dim
values and it names action_dim actions; otherwise DataPlaneError says what
was declared and what arrived. Whether the chunk answers the request in
flight, from the validated model, is ``executor.chunks``' business.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire.control_plane import duration_from_seconds, seconds_from_duration
from lerobot_ros.protocol.wire.data_plane.fields import (
    DataPlaneError,
    RequestId,
    float32_field,
    matrix,
    request_fields,
    request_id_of,
)

_SERVER_DURATIONS = ("queue_wait", "preprocess", "inference", "postprocess")


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
    batch_size: int = 0  # requests in the forward pass that computed the actions; 0: none ran


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
    batch_size: int = 0


def chunk_to_msg(reply: ChunkReply) -> ActionChunk:
    msg = ActionChunk(
        **request_fields(reply.request),
        status=reply.status,
        error=reply.error,
        model_fingerprint=reply.model_fingerprint,
        action_names=list(reply.action_names),
        rtc_applied=reply.rtc_applied,
        inference_delay_steps=reply.inference_delay_steps,
        **{name: duration_from_seconds(getattr(reply, f"{name}_s")) for name in _SERVER_DURATIONS},
        superseded=reply.superseded,
        active_sessions=reply.active_sessions,
        max_sessions=reply.max_sessions,
        pending_requests=reply.pending_requests,
        batch_size=reply.batch_size,
    )
    if reply.actions_robot is not None and reply.actions_model is not None:
        if reply.actions_robot.shape != reply.actions_model.shape or reply.actions_robot.ndim != 2:
            raise DataPlaneError(
                f"model-space actions {reply.actions_model.shape} and robot-space actions "
                f"{reply.actions_robot.shape} must be equal 2-D shapes"
            )
        msg.chunk_length, msg.action_dim = reply.actions_robot.shape
        msg.actions_model = float32_field(reply.actions_model)
        msg.actions_robot = float32_field(reply.actions_robot)
    return msg


def chunk_from_msg(msg: ActionChunk) -> ReceivedChunk:
    """Decode a chunk; the arrays are checked against the declared shape."""
    if msg.action_dim and len(msg.action_names) != msg.action_dim:
        raise DataPlaneError(
            f"chunk names {len(msg.action_names)} actions but declares action_dim {msg.action_dim}"
        )
    return ReceivedChunk(
        request=request_id_of(msg),
        status=msg.status,
        error=msg.error,
        model_fingerprint=msg.model_fingerprint,
        action_names=tuple(msg.action_names),
        actions_model=matrix(msg.actions_model, msg.chunk_length, msg.action_dim, "actions_model"),
        actions_robot=matrix(msg.actions_robot, msg.chunk_length, msg.action_dim, "actions_robot"),
        rtc_applied=msg.rtc_applied,
        inference_delay_steps=msg.inference_delay_steps,
        server_durations_s={
            name: seconds_from_duration(getattr(msg, name)) for name in _SERVER_DURATIONS
        },
        superseded=msg.superseded,
        batch_size=msg.batch_size,
    )
