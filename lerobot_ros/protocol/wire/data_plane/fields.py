"""What both data plane messages carry alike: the request header and float32 arrays.

Invariant: a chunk echoes its observation's header untouched, and a float
array whose length disagrees with its declared shape never becomes a
value. Float arrays are assigned as ``array.array`` and read with
``np.frombuffer``: rclpy iterates numpy arrays element by element.
"""

from __future__ import annotations

import array
import dataclasses
from dataclasses import dataclass

import numpy as np

from lerobot_ros.msg import ActionChunk, Observation


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


def request_id_of(msg: Observation | ActionChunk) -> RequestId:
    return RequestId(
        msg.session_id, msg.client_id, msg.seq, msg.episode, msg.epoch, msg.sent_monotonic_ns
    )


def request_fields(request: RequestId) -> dict:
    """The header both data plane messages carry (a chunk echoes its observation's)."""
    return {"schema_version": Observation.CURRENT_SCHEMA_VERSION, **dataclasses.asdict(request)}


def float_array(values) -> np.ndarray:
    # float32[] fields arrive as array.array('f'); a view, no copy.
    return (
        np.frombuffer(values, dtype=np.float32) if len(values) else np.zeros(0, dtype=np.float32)
    )


def matrix(values, rows: int, columns: int, name: str) -> np.ndarray:
    """``values`` as a [rows, columns] float32 view; DataPlaneError when the count disagrees."""
    flat = float_array(values)
    if flat.size != rows * columns:
        raise DataPlaneError(
            f"{name} holds {flat.size} values; expected {rows} x {columns} = {rows * columns}"
        )
    return flat.reshape(rows, columns)


def float32_field(values: np.ndarray) -> array.array:
    result = array.array("f")
    result.frombytes(np.ascontiguousarray(values, dtype=np.float32).tobytes())
    return result
