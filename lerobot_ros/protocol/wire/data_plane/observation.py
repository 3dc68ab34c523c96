"""The Observation message from plain values (robot side) and back (server side).

Invariant: an observation that is oversize or structurally broken (frames
the parser would have to guess at, prefixes whose length disagrees with
their declared shape) never becomes an ``ObservationFrame``; the
DataPlaneError says what was expected and what arrived. What the values
must equal (the session's ids, the policy's state size and cameras) is the
request path's business, not this module's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.msg import Observation
from lerobot_ros.protocol.wire.data_plane.cameras import frames_from_msg
from lerobot_ros.protocol.wire.data_plane.fields import (
    RequestId,
    float32_field,
    float_array,
    matrix,
    request_fields,
    request_id_of,
)
from lerobot_ros.protocol.wire.data_plane.limits import RequestLimits, check_sizes


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


@dataclass(frozen=True)
class OutgoingObservation:
    """One request's observation as the robot sends it: the values ``observation_to_msg`` puts on
    the wire.

    Camera payloads are already encoded (``cameras.camera_payloads`` makes them); a new Observation
    field is one field here, one line in ``observation_to_msg`` and one in
    ``observation_from_msg``.
    """

    request: RequestId
    task: str
    state: np.ndarray
    compressed: Mapping[str, CompressedImage] = field(default_factory=dict)
    raw: Mapping[str, Image] = field(default_factory=dict)
    inference_delay_steps: int = 0
    prefix_model: np.ndarray | None = None  # [steps, action_dim]
    prefix_robot: np.ndarray | None = None


def observation_to_msg(observation: OutgoingObservation) -> Observation:
    """The Observation message for one request."""
    msg = Observation(
        **request_fields(observation.request),
        task=observation.task,
        inference_delay_steps=observation.inference_delay_steps,
    )
    msg.state = float32_field(observation.state)
    msg.compressed_camera_names = list(observation.compressed)
    msg.compressed_images = list(observation.compressed.values())
    msg.raw_camera_names = list(observation.raw)
    msg.raw_images = list(observation.raw.values())
    prefix_model, prefix_robot = observation.prefix_model, observation.prefix_robot
    if prefix_model is not None and prefix_robot is not None and len(prefix_model):
        msg.prefix_steps = len(prefix_model)
        msg.prefix_model = float32_field(prefix_model)
        msg.prefix_robot = float32_field(prefix_robot)
    return msg


def observation_from_msg(
    msg: Observation,
    action_dim: int,
    limits: RequestLimits = RequestLimits(),
    policy_sizes: dict[str, tuple[int, int]] | None = None,
) -> ObservationFrame:
    """Decode an observation within ``limits``; images become RGB arrays.

    ``policy_sizes``: the (height, width) each camera is fed to the policy at (see
    ``frames_from_msg``).
    """
    check_sizes(msg, limits)
    frames = frames_from_msg(msg, limits, policy_sizes)
    prefix_model = prefix_robot = None
    if msg.prefix_steps:
        prefix_model = matrix(msg.prefix_model, msg.prefix_steps, action_dim, "prefix_model")
        prefix_robot = matrix(msg.prefix_robot, msg.prefix_steps, action_dim, "prefix_robot")
    return ObservationFrame(
        request=request_id_of(msg),
        schema_version=msg.schema_version,
        task=msg.task,
        state=float_array(msg.state),
        images=frames,
        inference_delay_steps=msg.inference_delay_steps,
        prefix_model=prefix_model,
        prefix_robot=prefix_robot,
    )
