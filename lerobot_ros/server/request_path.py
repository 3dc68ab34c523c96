"""From a deposited Observation message to a published ActionChunk.

Invariants: a bad observation is answered with a REJECTED chunk that says
what was expected and what arrived, is counted and audited, and leaves the
session working; an observation from an older episode or a closed session
never produces actions; an exception in inference is answered with a FAILED
chunk and never ends the worker. Every request gets exactly one audit line,
and a request's chunk is the one it would get alone, whoever shares its
forward pass (``handle_batch``; the line and the chunk say the batch size).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lerobot_ros.contract import ServerCapabilities, shown, truncated
from lerobot_ros.wire.data_plane import (
    ChunkReply,
    DataPlaneError,
    ObservationFrame,
    RequestId,
    RequestLimits,
    chunk_to_msg,
    observation_from_msg,
    observation_record,
    request_id_of,
)
from lerobot_ros.msg import ActionChunk
from lerobot_ros.server.scheduler import Ready
from lerobot_ros.server.sessions import EpisodeMove, Session, SessionRegistry

if TYPE_CHECKING:  # torch: imported with the policy, after the node is up (startup.py)
    from lerobot_ros.server.inference import PreparedRequest

log = logging.getLogger(__name__)


class ObservationRejected(ValueError):
    """The observation does not fit the session's contract."""


def check_observation(frame: ObservationFrame, capabilities: ServerCapabilities, session: Session) -> None:
    """Raise ObservationRejected with what was expected and what arrived.

    ``frame`` comes from ``observation_from_msg``, which already refused
    anything beyond the size bounds (``RequestLimits``).
    """
    low, high = capabilities.schema_version_min, capabilities.schema_version_max
    if not low <= frame.schema_version <= high:
        raise ObservationRejected(f"schema version {frame.schema_version}; expected {low}..{high}")
    if frame.request.session_id != session.session_id:
        # Never the open session's id: it is another robot's, for all this message proves.
        raise ObservationRejected(
            f"session id {shown(frame.request.session_id)} is not this client's open session; open a session first"
        )
    if frame.request.client_id != session.client_id:
        # The topic it arrived on names the client; a message claiming another
        # would have its chunk published on that other robot's topic.
        raise ObservationRejected(
            f"client id {frame.request.client_id!r} arrived on the topic of client {session.client_id!r}"
        )
    state = frame.state
    if state.size != capabilities.state_dim:
        raise ObservationRejected(f"state has {state.size} values; the policy expects {capabilities.state_dim}")
    if not np.isfinite(state).all():
        bad = [int(i) for i in np.flatnonzero(~np.isfinite(state))]
        raise ObservationRejected(f"state is not finite at indices {bad}: {state.tolist()}")
    expected = capabilities.camera_names
    missing = [name for name in expected if name not in frame.images]
    # Cameras the policy does not read are ignored, as the executor ignores them
    # (it sends only the policy's) and as OpenSession warns: inference picks the policy's by name.
    if missing:
        raise ObservationRejected(
            f"cameras differ: missing {missing}; policy expects {list(expected)}, observation has {list(frame.images)}"
        )
    pinned = capabilities.pinned_task
    if pinned and frame.task and frame.task != pinned:
        raise ObservationRejected(f"task {frame.task!r} sent to a server pinned to {pinned!r}")
    for name in ("prefix_model", "prefix_robot"):
        prefix = getattr(frame, name)
        if prefix is not None and not np.isfinite(prefix).all():
            raise ObservationRejected(f"{name} holds non-finite values")


@dataclass
class Outcome:
    """What happened to one request, for the audit line and the counters."""

    reply: ChunkReply
    outcome: str  # "ok", "rejected", "failed", "dropped"


@dataclass
class Answered:
    """A batch's outcomes, in the order handed over, and the size of each forward pass it ran."""

    outcomes: list[Outcome]
    forwards: list[int]


@dataclass
class _Request:
    """One request on its way through ``handle_batch``."""

    ready: Ready
    reply: ChunkReply
    outcome: str = "ok"
    frame: ObservationFrame | None = None
    prepared: PreparedRequest | None = None

    def refuse(self, outcome: str, error: str) -> None:
        self.outcome, self.prepared = outcome, None
        self.reply.status, self.reply.error = ActionChunk.STATUS_REJECTED, error
        self.reply.actions_model = self.reply.actions_robot = None

    def fail(self, error: Exception) -> None:
        request = self.reply.request
        log.error("inference failed for client %s seq %d", request.client_id, request.seq, exc_info=error)
        self.refuse("failed", f"{type(error).__name__}: {error}")
        self.reply.status, self.reply.batch_size = ActionChunk.STATUS_FAILED, 0


class RequestHandler:
    """Turns one scheduler hand-off into one reply; owns no thread."""

    def __init__(
        self,
        runner,
        sessions: SessionRegistry,
        publish: Callable[[str, ActionChunk], None],
        audit: Callable[[dict], None],
        load: Callable[[], tuple[int, int, int]],
        capture: Callable[[dict], None] | None = None,
        limits: RequestLimits = RequestLimits(),
    ) -> None:
        self.runner = runner
        self.capabilities: ServerCapabilities = runner.capabilities
        self._camera_sizes = self.capabilities.camera_sizes  # a derived dict: built once, not per request
        self.sessions = sessions
        self.publish = publish
        self.audit = audit
        self.load = load
        self.capture = capture
        self.limits = limits

    def handle(self, ready: Ready, refusal: str | None = None) -> Outcome:
        """Answer one observation; with ``refusal``, answer it REJECTED with that reason, without running it."""
        return self.handle_batch([ready], refusal).outcomes[0]

    def handle_batch(self, batch: list[Ready], refusal: str | None = None) -> Answered:
        """Answer observations of distinct sessions, sharing forward passes where their inputs stack.

        Each is decoded, checked and preprocessed with its own session's
        processors; one that is refused is answered on its own and never
        enters a forward pass. If a shared forward pass raises, its requests
        are run one at a time, so one bad request cannot fail the others.
        """
        requests = [self._admit(ready, refusal) for ready in batch]
        forwards = self._infer([request for request in requests if request.prepared is not None])
        return Answered([self._answer(request) for request in requests], forwards)

    def _admit(self, ready: Ready, refusal: str | None) -> _Request:
        taken = time.monotonic()
        request = request_id_of(ready.item)
        if len(request.session_id) > self.limits.max_id_chars or len(request.client_id) > self.limits.max_id_chars:
            # The reply echoes the ids and the audit line records them: never an oversize copy.
            request = dataclasses.replace(
                request,
                session_id=truncated(request.session_id, self.limits.max_id_chars),
                client_id=truncated(request.client_id, self.limits.max_id_chars),
            )
        active, maximum, pending = self.load()
        reply = ChunkReply(
            request=request,
            status=ActionChunk.STATUS_OK,
            model_fingerprint=self.capabilities.model_fingerprint,
            action_names=self.capabilities.action_names,
            queue_wait_s=max(0.0, taken - ready.deposited_at),
            superseded=ready.superseded,
            active_sessions=active,
            max_sessions=maximum,
            pending_requests=pending,
        )
        pending_request = _Request(ready, reply)
        session = self.sessions.get(ready.key)
        if session is None:
            # Closed or collected while the observation waited: nobody listens.
            pending_request.refuse("dropped", f"client {ready.key!r} has no open session")
        elif refusal is not None:
            pending_request.refuse("rejected", refusal)
        else:
            decode_started = time.perf_counter()
            try:
                frame = pending_request.frame = observation_from_msg(
                    ready.item, len(self.capabilities.action_names), self.limits, self._camera_sizes
                )
                check_observation(frame, self.capabilities, session)
                # An observation of a newer episode may overtake its ResetEpisode call.
                move, episode = self.sessions.advance_episode(session, frame.request.episode)
                if move is EpisodeMove.OVER:
                    raise ObservationRejected(f"episode {frame.request.episode} is over; the session is at episode {episode}")
                if self.sessions.claim_processor_reset(session):
                    self.runner.reset_session(session.processors)
                decoded = time.perf_counter() - decode_started
                pending_request.prepared = self.runner.prepare(
                    frame, session.processors, frame.task or session.task, session.rtc_enabled
                )
                reply.preprocess_s = decoded
            except (ObservationRejected, DataPlaneError) as error:
                pending_request.refuse("rejected", str(error))
            except Exception as error:  # noqa: BLE001 - one failed request must not end the worker
                pending_request.fail(error)
        return pending_request

    def _infer(self, requests: list[_Request]) -> list[int]:
        """Run the admitted requests, one forward pass per group of stackable inputs; the sizes run."""
        groups: dict[tuple, list[_Request]] = {}
        for request in requests:
            groups.setdefault(self.runner.batch_key(request.prepared), []).append(request)
        forwards: list[int] = []
        for group in groups.values():
            if not self._run_group(group, forwards) and len(group) > 1:
                for request in group:  # one bad request must not fail the others
                    self._run_group([request], forwards)
        return forwards

    def _run_group(self, group: list[_Request], forwards: list[int]) -> bool:
        """One forward pass for ``group``, its size appended to ``forwards``; False if it raised.

        A lone request that raises is failed with the error; a larger group is
        only logged, for the caller to rerun one request at a time.
        """
        try:
            actions, inference_s = self.runner.infer([request.prepared for request in group])
        except Exception as error:  # noqa: BLE001 - one failed forward must not end the worker
            if len(group) == 1:
                group[0].fail(error)
            else:
                log.exception("a forward pass of %d requests failed; running them one at a time", len(group))
            return False
        forwards.append(len(group))
        for row, request in enumerate(group):
            self._finish(request, actions[row : row + 1], inference_s, len(group))
        return True

    def _finish(self, request: _Request, actions, inference_s: float, batch_size: int) -> None:
        reply = request.reply
        try:
            result = self.runner.finish(request.prepared, actions, inference_s)
            if not np.isfinite(result.actions_robot).all():
                raise FloatingPointError("the policy produced non-finite actions")
        except Exception as error:  # noqa: BLE001
            request.fail(error)
            return
        reply.actions_model, reply.actions_robot = result.actions_model, result.actions_robot
        reply.preprocess_s += result.preprocess_s
        reply.inference_s = result.inference_s
        reply.postprocess_s = result.postprocess_s
        reply.rtc_applied = result.rtc_applied
        reply.inference_delay_steps = result.inference_delay_steps
        reply.batch_size = batch_size

    def _answer(self, request: _Request) -> Outcome:
        """Publish, audit and capture one request's reply."""
        ready, reply = request.ready, request.reply
        outcome = request.outcome
        publish_started = time.perf_counter()
        if outcome != "dropped":
            try:
                # To the topic the observation arrived on, whatever the message claims.
                self.publish(ready.key, chunk_to_msg(reply))
            except Exception as error:  # noqa: BLE001 - still audited and counted below
                log.exception("chunk for client %s seq %d could not be published", ready.key, reply.request.seq)
                outcome, reply.error = "failed", f"publishing the chunk failed: {type(error).__name__}: {error}"
        publish_s = time.perf_counter() - publish_started
        self._record(audit_record(reply, outcome, publish_s), self.audit, "audit")
        if self.capture is not None:
            self._record(capture_record(ready.item, request.frame, reply, outcome), self.capture, "capture")
        return Outcome(reply, outcome)

    @staticmethod
    def _record(record: dict, sink: Callable[[dict], None], what: str) -> None:
        # A full disk or an oversize capture record must not cost the robot its chunk or the worker its life.
        try:
            sink(record)
        except Exception:  # noqa: BLE001
            log.exception("%s record for client %s seq %s could not be written", what, record.get("client"), record.get("seq"))


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


def audit_record(reply: ChunkReply, outcome: str, publish_s: float) -> dict:
    record = _request_header(reply.request, outcome) | {
        "queue_wait_ms": _ms(reply.queue_wait_s),
        "preprocess_ms": _ms(reply.preprocess_s),
        "inference_ms": _ms(reply.inference_s),
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


def capture_record(msg, frame: ObservationFrame | None, reply: ChunkReply, outcome: str) -> dict:
    """A self-contained request/response pair for offline replay (no pickle)."""
    record = {
        "request": observation_record(
            msg, frame.prefix_model if frame is not None else None, frame.prefix_robot if frame is not None else None
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
    return record
