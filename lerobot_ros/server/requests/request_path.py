"""From a deposited Observation message to a published ActionChunk, in three stages.

Invariants: a bad observation is answered with a REJECTED chunk that says
what was expected and what arrived, is counted and audited, and leaves the
session working; an observation from an older episode or a closed session
never produces actions; an exception in inference is answered with a FAILED
chunk and never ends the worker. Every request gets exactly one audit line,
and a request's chunk is the one it would get alone, whoever shares its
forward pass (the line and the chunk say the batch size).

The stages, each a method of ``RequestHandler`` that the pipeline
(pipeline.py) runs on its own thread and the serial worker (worker.py)
runs in turn (``handle_batch``):

1. ``admit``: decode, validate and preprocess one observation with its
   session's processors (or answer it without running it);
2. ``forward``: the forward passes of admitted requests, one per group of
   stackable inputs; nothing else;
3. ``finish`` then ``answer``: postprocess each row with its session's
   postprocessor, check it, publish, audit and capture.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.contract import ServerCapabilities, shown, truncated
from lerobot_ros.protocol.wire.data_plane import (
    ChunkReply,
    DataPlaneError,
    ObservationFrame,
    RequestLimits,
    chunk_to_msg,
    observation_from_msg,
    request_id_of,
)
from lerobot_ros.server.requests.request_records import StageWaits, audit_record, capture_record
from lerobot_ros.server.requests.scheduler import Ready
from lerobot_ros.server.sessions.registry import EpisodeMove, Session, SessionRegistry

if TYPE_CHECKING:  # torch: imported with the policy, after the node is up (startup.py)
    from lerobot_ros.server.policy.inference import PreparedRequest

log = logging.getLogger(__name__)


class ObservationRejected(ValueError):
    """The observation does not fit the session's contract."""


def check_observation(
    frame: ObservationFrame, capabilities: ServerCapabilities, session: Session
) -> None:
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
            f"session id {shown(frame.request.session_id)} is not this client's open session; "
            "open a session first"
        )
    if frame.request.client_id != session.client_id:
        # The topic it arrived on names the client; a message claiming another
        # would have its chunk published on that other robot's topic.
        raise ObservationRejected(
            f"client id {frame.request.client_id!r} arrived on the topic of client "
            f"{session.client_id!r}"
        )
    state = frame.state
    if state.size != capabilities.state_dim:
        raise ObservationRejected(
            f"state has {state.size} values; the policy expects {capabilities.state_dim}"
        )
    if not np.isfinite(state).all():
        bad = [int(i) for i in np.flatnonzero(~np.isfinite(state))]
        raise ObservationRejected(f"state is not finite at indices {bad}: {state.tolist()}")
    expected = capabilities.camera_names
    missing = [name for name in expected if name not in frame.images]
    # Cameras the policy does not read are ignored, as the executor ignores them
    # (it sends only the policy's) and as OpenSession warns: inference picks the policy's by name.
    if missing:
        raise ObservationRejected(
            f"cameras differ: missing {missing}; policy expects {list(expected)}, observation has "
            f"{list(frame.images)}"
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
    outcome: str  # "ok", "rejected", "failed", "dropped", "superseded"


@dataclass
class Answered:
    """A batch's outcomes, in the order handed over, and the size of each forward pass it ran."""

    outcomes: list[Outcome]
    forwards: list[int]


@dataclass
class ServedRequest:
    """One request on its way through the stages: what it is, what became of it, and when."""

    ready: Ready
    reply: ChunkReply
    outcome: str = "ok"
    frame: ObservationFrame | None = None
    prepared: PreparedRequest | None = None
    admitted_at: float = 0.0  # monotonic: the admission stage ended
    forward_started_at: float = 0.0
    forwarded_at: float = 0.0  # its forward pass returned (or it never needed one)
    host_cpu_s: float = 0.0  # CPU seconds of its admission stage (the pipeline measures it)

    @property
    def key(self):
        return self.ready.key

    def refuse(self, outcome: str, error: str) -> None:
        self.outcome, self.prepared = outcome, None
        self.reply.status, self.reply.error = ActionChunk.STATUS_REJECTED, error
        self.reply.actions_model = self.reply.actions_robot = None

    def fail(self, error: Exception) -> None:
        request = self.reply.request
        log.error(
            "inference failed for client %s seq %d", request.client_id, request.seq, exc_info=error
        )
        self.refuse("failed", f"{type(error).__name__}: {error}")
        self.reply.status, self.reply.batch_size = ActionChunk.STATUS_FAILED, 0

    def supersede(self) -> None:
        """A newer observation of its session arrived while this one was prepared: never forwarded,
        never answered."""
        self.refuse(
            "superseded", "a newer observation of this session arrived before the forward pass"
        )


@dataclass
class Forward:
    """One forward pass's requests and what it returned: actions [n, chunk, dim] and seconds; no
    actions where its lone request failed (the failure is on the request)."""

    requests: list[ServedRequest]
    actions: object | None
    inference_s: float


class RequestHandler:
    """The request path's stages; owns no thread (the worker or the pipeline runs them)."""

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
        # a derived dict: built once, not per request
        self._camera_sizes = self.capabilities.camera_sizes
        self.sessions = sessions
        self.publish = publish
        self.audit = audit
        self.load = load
        self.capture = capture
        self.limits = limits

    def handle(self, ready: Ready, refusal: str | None = None) -> Outcome:
        """Answer one observation; with ``refusal``, answer it REJECTED with that reason, without
        running it."""
        return self.handle_batch([ready], refusal).outcomes[0]

    def handle_batch(self, batch: list[Ready], refusal: str | None = None) -> Answered:
        """Answer observations of distinct sessions, every stage in turn on the caller's thread
        (the serial path).

        Each is decoded, checked and preprocessed with its own session's
        processors; one that is refused is answered on its own and never
        enters a forward pass. If a shared forward pass raises, its requests
        are run one at a time, so one bad request cannot fail the others.
        """
        requests = [self.admit(ready, refusal) for ready in batch]
        forwards = []
        for forward in self.forward(
            [request for request in requests if request.prepared is not None]
        ):
            self.finish(forward)
            if forward.actions is not None:
                forwards.append(len(forward.requests))
        return Answered([self.answer(request) for request in requests], forwards)

    # ---- stage 1: admission ----------------------------------------------

    def admit(self, ready: Ready, refusal: str | None = None) -> ServedRequest:
        """Decode, check and preprocess one observation; a refused one comes back without
        ``prepared``."""
        taken = time.monotonic()
        request = request_id_of(ready.item)
        if (
            len(request.session_id) > self.limits.max_id_chars
            or len(request.client_id) > self.limits.max_id_chars
        ):
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
        served = ServedRequest(ready, reply)
        session = self.sessions.get(ready.key)
        if session is None:
            # Closed or collected while the observation waited: nobody listens.
            served.refuse("dropped", f"client {ready.key!r} has no open session")
        elif refusal is not None:
            served.refuse("rejected", refusal)
        else:
            self._prepare(served, session)
        served.admitted_at = served.forwarded_at = time.monotonic()
        return served

    def _prepare(self, served: ServedRequest, session: Session) -> None:
        decode_started = time.perf_counter()
        try:
            frame = served.frame = observation_from_msg(
                served.ready.item,
                len(self.capabilities.action_names),
                self.limits,
                self._camera_sizes,
            )
            check_observation(frame, self.capabilities, session)
            # An observation of a newer episode may overtake its ResetEpisode call.
            move, episode = self.sessions.advance_episode(session, frame.request.episode)
            if move is EpisodeMove.OVER:
                raise ObservationRejected(
                    f"episode {frame.request.episode} is over; the session is at episode {episode}"
                )
            if self.sessions.claim_processor_reset(session):
                self.runner.reset_session(session.processors)
            decoded = time.perf_counter() - decode_started
            served.prepared = self.runner.prepare(
                frame, session.processors, frame.task or session.task, session.rtc_enabled
            )
            served.reply.preprocess_s = decoded
        except (ObservationRejected, DataPlaneError) as error:
            served.refuse("rejected", str(error))
        except Exception as error:  # noqa: BLE001 - one failed request must not end the worker
            served.fail(error)

    # ---- stage 2: forward ------------------------------------------------

    def forward(self, requests: list[ServedRequest]) -> Iterator[Forward]:
        """The forward passes of admitted requests, one per group of stackable inputs, each yielded
        as it returns.

        If a shared pass raises, its requests run one at a time, so one bad
        request cannot fail the others; a lone request that raises is failed.
        """
        groups: dict[tuple, list[ServedRequest]] = {}
        for request in requests:
            groups.setdefault(self.runner.batch_key(request.prepared), []).append(request)
        for group in groups.values():
            forward = self._forward_group(group)
            if forward.actions is None and len(group) > 1:
                for request in group:
                    yield self._forward_group([request])
            else:
                yield forward

    def _forward_group(self, group: list[ServedRequest]) -> Forward:
        started = time.monotonic()
        for request in group:
            request.forward_started_at = started
        try:
            actions, inference_s = self.runner.infer([request.prepared for request in group])
        except Exception as error:  # noqa: BLE001 - one failed forward must not end the worker
            if len(group) == 1:
                group[0].fail(error)
            else:
                log.error(
                    "a forward pass of %d requests failed; running them one at a time",
                    len(group),
                    exc_info=error,
                )
            return Forward(group, None, 0.0)
        finally:
            returned = time.monotonic()
            for request in group:
                request.forwarded_at = returned
        return Forward(group, actions, inference_s)

    # ---- stage 3: finish and answer --------------------------------------

    def finish(self, forward: Forward) -> None:
        """Each row of a forward pass through its own session's postprocessor, checked finite."""
        if forward.actions is None:
            return
        size = len(forward.requests)
        for row, request in enumerate(forward.requests):
            reply = request.reply
            try:
                result = self.runner.finish(
                    request.prepared, forward.actions[row : row + 1], forward.inference_s
                )
                if not np.isfinite(result.actions_robot).all():
                    raise FloatingPointError("the policy produced non-finite actions")
            except Exception as error:  # noqa: BLE001
                request.fail(error)
                continue
            reply.actions_model, reply.actions_robot = result.actions_model, result.actions_robot
            reply.preprocess_s += result.preprocess_s
            reply.inference_s = result.inference_s
            reply.postprocess_s = result.postprocess_s
            reply.rtc_applied = result.rtc_applied
            reply.inference_delay_steps = result.inference_delay_steps
            reply.batch_size = size

    def answer(self, request: ServedRequest, finish_started_at: float | None = None) -> Outcome:
        """Publish, audit and capture one request's reply (a superseded one is audited, never
        published)."""
        ready, reply = request.ready, request.reply
        outcome = request.outcome
        publish_started = time.perf_counter()
        if outcome not in ("dropped", "superseded"):
            try:
                # To the topic the observation arrived on, whatever the message claims.
                self.publish(ready.key, chunk_to_msg(reply))
            except Exception as error:  # noqa: BLE001 - still audited and counted below
                log.exception(
                    "chunk for client %s seq %d could not be published",
                    ready.key,
                    reply.request.seq,
                )
                outcome, reply.error = (
                    "failed",
                    f"publishing the chunk failed: {type(error).__name__}: {error}",
                )
        publish_s = time.perf_counter() - publish_started
        waits = StageWaits(
            forward_wait_s=max(0.0, request.forward_started_at - request.admitted_at)
            if request.forward_started_at
            else 0.0,
            finish_wait_s=max(
                0.0, (finish_started_at or request.forwarded_at) - request.forwarded_at
            ),
        )
        self._record(audit_record(reply, outcome, publish_s, waits), self.audit, "audit")
        if self.capture is not None and outcome != "superseded":
            self._record(
                capture_record(ready.item, request.frame, reply, outcome), self.capture, "capture"
            )
        return Outcome(reply, outcome)

    @staticmethod
    def _record(record: dict, sink: Callable[[dict], None], what: str) -> None:
        # A full disk or an oversize capture record must not cost the robot its chunk or the worker
        # its life.
        try:
            sink(record)
        except Exception:  # noqa: BLE001
            log.exception(
                "%s record for client %s seq %s could not be written",
                what,
                record.get("client"),
                record.get("seq"),
            )
