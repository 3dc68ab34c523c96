"""An Observation message as a plain record (numbers, strings, bytes, arrays) and back.

Invariant: the record keeps the message exactly as it arrived, images as
their wire bytes, so ``observation_from_record(observation_record(msg, ...))``
is the message the robot sent (with a fresh send stamp): the capture stores
records and replay rebuilds messages from them, and no other place knows
these fields. Plain values only, for msgpack (no pickle).
"""

from __future__ import annotations

import time

import numpy as np
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.msg import Observation
from lerobot_ros.protocol.wire.data_plane.fields import RequestId, float_array
from lerobot_ros.protocol.wire.data_plane.observation import (
    OutgoingObservation,
    observation_to_msg,
)


def observation_record(
    msg: Observation, prefix_model: np.ndarray | None, prefix_robot: np.ndarray | None
) -> dict:
    """``msg`` as a plain record; the prefixes are the parsed ones (None when the message did not
    parse)."""
    return {
        "schema_version": msg.schema_version,
        "session_id": msg.session_id,
        "client_id": msg.client_id,
        "seq": msg.seq,
        "episode": msg.episode,
        "epoch": msg.epoch,
        "task": msg.task,
        "state": float_array(msg.state),
        "compressed_images": {
            name: {"format": image.format, "data": bytes(image.data)}
            for name, image in zip(
                msg.compressed_camera_names, msg.compressed_images, strict=False
            )
        },
        "raw_images": {
            name: {
                "encoding": image.encoding,
                "height": image.height,
                "width": image.width,
                "step": image.step,
                "data": bytes(image.data),
            }
            for name, image in zip(msg.raw_camera_names, msg.raw_images, strict=False)
        },
        "inference_delay_steps": msg.inference_delay_steps,
        "prefix_model": prefix_model,
        "prefix_robot": prefix_robot,
    }


def observation_from_record(record: dict) -> Observation:
    """The Observation message a record was made from, stamped as sent now."""
    compressed = {
        name: CompressedImage(format=image["format"], data=image["data"])
        for name, image in record["compressed_images"].items()
    }
    raw = {
        name: Image(
            height=image["height"],
            width=image["width"],
            step=image["step"],
            encoding=image["encoding"],
            data=image["data"],
        )
        for name, image in record["raw_images"].items()
    }
    ids = RequestId(
        record["session_id"],
        record["client_id"],
        record["seq"],
        record["episode"],
        record["epoch"],
        time.monotonic_ns(),
    )
    msg = observation_to_msg(
        OutgoingObservation(
            ids,
            record["task"],
            record["state"],
            compressed,
            raw,
            record["inference_delay_steps"],
            record["prefix_model"],
            record["prefix_robot"],
        )
    )
    msg.schema_version = record.get("schema_version", Observation.CURRENT_SCHEMA_VERSION)
    return msg
