"""The executor's one request in flight: what it sends, and what the merge of its answer needs.

Invariant: a request's observation becomes an ``OutgoingObservation`` in one
place (``PendingRequest.outgoing``), from values fixed when the core numbered
the request: the ids, the task, the state, the frames of the policy's
cameras, the RTC delay and prefix (only when RTC is on), the JPEG quality and
the policy's camera sizes. Whoever publishes it adds nothing; the merge reads
the same queue snapshot the prefix was cut from.

Plain values; the camera payloads are encoded when ``outgoing`` is called
(on the network worker's thread, outside the core's lock: encoding a frame
must never hold up a control tick).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lerobot_ros.executor.control.action_queue import QueueSnapshot
from lerobot_ros.executor.control.joint_mapping import JointMapping
from lerobot_ros.executor.requests.observation_assembly import AssembledObservation
from lerobot_ros.protocol.wire.data_plane import OutgoingObservation, RequestId, camera_payloads


@dataclass(frozen=True)
class PendingRequest:
    """One request the core numbered and put in flight, and what its merge needs later."""

    request: RequestId
    observation: AssembledObservation
    snapshot: QueueSnapshot
    inference_delay_steps: int  # 0 unless RTC is on
    rtc: bool
    task: str = ""  # sent with the observation; empty: the session's task
    jpeg_quality: int = 0
    # frames larger than the policy's are shrunk to it
    camera_sizes: Mapping[str, tuple[int, int]] | None = None
    # the queue is in robot units; the RTC prefix goes back in the policy's
    mapping: JointMapping | None = None
    # the replica whose session it is for (the serving one, or the standby's for a hedge)
    replica: str = ""

    def outgoing(self) -> OutgoingObservation:
        """The observation as it goes on the wire (raises ``images.ImageError`` for an unusable
        frame)."""
        compressed, raw = camera_payloads(
            self.observation.cameras,
            self.jpeg_quality,
            dict(self.camera_sizes) if self.camera_sizes is not None else None,
        )
        prefix_model = self.snapshot.left_over_model if self.rtc else None
        prefix_robot = self.snapshot.left_over_robot if self.rtc else None
        if prefix_robot is not None and self.mapping is not None:
            prefix_robot = self.mapping.to_policy(prefix_robot).astype(prefix_robot.dtype)
        return OutgoingObservation(
            self.request,
            self.task,
            self.observation.state,
            compressed,
            raw,
            self.inference_delay_steps,
            prefix_model,
            prefix_robot,
        )
