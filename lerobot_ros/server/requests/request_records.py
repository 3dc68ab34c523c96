"""The records one request leaves behind: its audit line and its capture pair.

Invariant: every audit line starts with the same header (when, whose
request, what became of it) and names each stage's duration, so a slow
request shows where its time went: the mailbox wait, the admission stage
(decode, validation, preprocessing), the wait for the forward thread, the
forward, the wait for the finish thread, postprocessing and publishing.
Session events that belong to no one request (a standby's promotion) share
its first fields: when, which session, whose, what happened.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from lerobot_ros.protocol.wire.data_plane import (
    ChunkReply,
    ObservationFrame,
    RequestId,
    observation_record,
)


@dataclass(frozen=True)
class StageWaits:
    """Time a request spent waiting between the pipeline's stages (0 on the serial path's own
    thread)."""

    forward_wait_s: float = 0.0  # prepared, waiting for the forward thread
    finish_wait_s: float = 0.0  # forwarded, waiting for the finish thread


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 3)


def _request_header(request: RequestId, outcome: str) -> dict:
    """The fields every audit line starts with: when, whose request, and what became of it."""
    return {
        "wall_time": round(time.time(), 6),
        "session": request.session_id,
        "client": request.client_id,
        "seq": request.seq,
        "episode": request.episode,
        "epoch": request.epoch,
        "outcome": outcome,
    }


def audit_record(
    reply: ChunkReply, outcome: str, publish_s: float, waits: StageWaits = StageWaits()
) -> dict:
    record = _request_header(reply.request, outcome) | {
        "queue_wait_ms": _ms(reply.queue_wait_s),
        "preprocess_ms": _ms(reply.preprocess_s),
        "forward_wait_ms": _ms(waits.forward_wait_s),
        "inference_ms": _ms(reply.inference_s),
        "finish_wait_ms": _ms(waits.finish_wait_s),
        "postprocess_ms": _ms(reply.postprocess_s),
        "publish_ms": _ms(publish_s),
        "superseded": reply.superseded,
        "rtc_applied": reply.rtc_applied,
        "inference_delay_steps": reply.inference_delay_steps,
        "batch_size": reply.batch_size,
    }
    if reply.error:
        record["error"] = reply.error
    return record


def arrival_refusal_record(request: RequestId, refusal: str) -> dict:
    """The audit line of an observation refused on arrival (never queued, never answered)."""
    return _request_header(request, "refused_on_arrival") | {"error": refusal}


def standby_promotion_record(session_id: str, client_id: str, waited_s: float) -> dict:
    """The audit line of a standby session its first admitted observation made an ordinary one."""
    return {
        "wall_time": round(time.time(), 6),
        "session": session_id,
        "client": client_id,
        "outcome": "standby_promoted",
        "standby_for_s": round(waited_s, 3),
    }


def capture_record(msg, frame: ObservationFrame | None, reply: ChunkReply, outcome: str) -> dict:
    """A self-contained request/response pair for offline replay (no pickle)."""
    return {
        "request": observation_record(
            msg,
            frame.prefix_model if frame is not None else None,
            frame.prefix_robot if frame is not None else None,
        ),
        "response": {
            "outcome": outcome,
            "status": reply.status,
            "error": reply.error,
            "actions_model": reply.actions_model,
            "actions_robot": reply.actions_robot,
            "rtc_applied": reply.rtc_applied,
            "inference_ms": _ms(reply.inference_s),
        },
    }
