"""Observation and ActionChunk messages <-> plain numpy values, both directions.

The one place that knows the data plane messages field by field, used by the
server (parse observations, build chunks) and by the torch-free executor
(build observations with their camera payloads, parse chunks). Invariant: a
message that is oversize or structurally broken (misaligned name lists,
arrays whose length disagrees with their declared shape, corrupt or
too-large images) never becomes a value; the error says what was expected
and what arrived. One module per job:

* ``fields``: the request header and float32 arrays both messages share;
* ``limits``: every size bound an observation must respect (``RequestLimits``);
* ``cameras``: camera payloads out (forward, re-encode, raw) and bounded frames in;
* ``observation`` and ``chunk``: the two messages;
* ``record``: an Observation as a plain record and back (capture and replay).
"""

from lerobot_ros.protocol.wire.data_plane.cameras import camera_payload, camera_payloads
from lerobot_ros.protocol.wire.data_plane.chunk import (
    ChunkReply,
    ReceivedChunk,
    chunk_from_msg,
    chunk_to_msg,
)
from lerobot_ros.protocol.wire.data_plane.fields import DataPlaneError, RequestId, request_id_of
from lerobot_ros.protocol.wire.data_plane.limits import RequestLimits, check_sizes
from lerobot_ros.protocol.wire.data_plane.observation import (
    ObservationFrame,
    OutgoingObservation,
    observation_from_msg,
    observation_to_msg,
)
from lerobot_ros.protocol.wire.data_plane.record import observation_from_record, observation_record

__all__ = [
    "ChunkReply",
    "DataPlaneError",
    "ObservationFrame",
    "OutgoingObservation",
    "ReceivedChunk",
    "RequestId",
    "RequestLimits",
    "camera_payload",
    "camera_payloads",
    "check_sizes",
    "chunk_from_msg",
    "chunk_to_msg",
    "observation_from_msg",
    "observation_from_record",
    "observation_record",
    "observation_to_msg",
    "request_id_of",
]
