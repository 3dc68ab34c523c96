"""Which action chunks may be merged, and the one request they may answer.

Invariants (architecture §4):

* one request in flight: a chunk is merged only if it answers exactly the
  latest request — same session, seq, episode and connection epoch; anything
  else (late, stale, foreign) is dropped and counted with a reason;
* never a chunk from another model: its fingerprint and ordered action names
  must be the ones validated at session open;
* never a malformed chunk: shape [T >= 1, action_dim] in both spaces, every
  value finite, status OK.

Plain Python: the session client's chunk callback hands decoded chunks to
``InFlight.offer_chunk`` (through the executor core, or directly for a
standalone client); the requester waits in ``InFlight.wait``.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from lerobot_ros.protocol.contract import ServerCapabilities, truncated
from lerobot_ros.protocol.wire.data_plane import ReceivedChunk, RequestId

STATUS_OK = 0  # ActionChunk.STATUS_OK
#: A drop explanation echoes what the chunk carried (error text, names); a
#: forged chunk must not make it arbitrarily long.
MAX_DROP_EXPLANATION_CHARS = 1000


@dataclass(frozen=True)
class ValidatedModel:
    """What the first successful handshake validated; every chunk must match it.

    Two replicas serve the same model when all fields are equal (a fleet
    moves a robot only between those).
    """

    fingerprint: str
    revision: str
    action_names: tuple[str, ...]
    camera_names: tuple[str, ...] = ()
    chunk_size: int = 0

    def difference(self, other: ValidatedModel) -> str | None:
        """Why ``other`` (a re-handshaken server's model) is not this one, or None."""
        changes = []
        if other.fingerprint != self.fingerprint:
            changes.append(f"fingerprint {self.fingerprint!r} -> {other.fingerprint!r}")
        if other.revision != self.revision:
            changes.append(f"revision {self.revision!r} -> {other.revision!r}")
        if other.action_names != self.action_names:
            changes.append(f"action names {list(self.action_names)} -> {list(other.action_names)}")
        if other.camera_names != self.camera_names:
            changes.append(f"cameras {list(self.camera_names)} -> {list(other.camera_names)}")
        if other.chunk_size != self.chunk_size:
            changes.append(f"chunk size {self.chunk_size} -> {other.chunk_size}")
        if not changes:
            return None
        return (
            "the server now serves a different model ("
            + "; ".join(changes)
            + "): never executing its chunks"
        )

    @classmethod
    def of(cls, capabilities: ServerCapabilities) -> ValidatedModel:
        return cls(
            capabilities.model_fingerprint,
            capabilities.model_revision,
            tuple(capabilities.action_names),
            tuple(capabilities.camera_names),
            capabilities.chunk_size,
        )


def rejection(
    chunk: ReceivedChunk, pending: RequestId | None, model: ValidatedModel | None
) -> tuple[str, str] | None:
    """(reason code, explanation) why ``chunk`` must not be merged, or None to merge it.

    ``pending`` is the request in flight (None: nothing is awaited, so any
    chunk is late) and ``model`` the one it must come from (set with it).
    """
    got = chunk.request
    if pending is None:
        return "late", f"chunk for seq {got.seq} arrived with no request in flight"
    for field, code in (
        ("session_id", "foreign_session"),
        ("client_id", "foreign_client"),
        ("epoch", "stale_epoch"),
        ("episode", "stale_episode"),
        ("seq", "stale_seq"),
    ):
        if getattr(got, field) != getattr(pending, field):
            return (
                code,
                f"chunk {field} {getattr(got, field)!r} does not answer the request in flight "
                f"({getattr(pending, field)!r})",
            )
    if got.sent_monotonic_ns != pending.sent_monotonic_ns:
        return "stale_seq", "chunk echoes another send time than the request in flight"
    if chunk.status != STATUS_OK:
        return "refused", f"server answered status {chunk.status}: {chunk.error}"
    if chunk.model_fingerprint != model.fingerprint:
        return (
            "wrong_model",
            f"chunk from model {chunk.model_fingerprint!r}, validated {model.fingerprint!r}",
        )
    if tuple(chunk.action_names) != model.action_names:
        return (
            "wrong_action_names",
            f"chunk columns {list(chunk.action_names)}, validated {list(model.action_names)}",
        )
    dim = len(model.action_names)
    for name, actions in (
        ("actions_robot", chunk.actions_robot),
        ("actions_model", chunk.actions_model),
    ):
        if actions.ndim != 2 or actions.shape[0] < 1 or actions.shape[1] != dim:
            return "bad_shape", f"{name} has shape {actions.shape}, expected [T >= 1, {dim}]"
        if not np.all(np.isfinite(actions)):
            return "non_finite", f"{name} holds non-finite values"
    return None


@dataclass(frozen=True)
class Answer:
    """What ``InFlight.wait`` returns: the chunk and the request it answers, or None (refused,
    timed out, or cancelled)."""

    chunk: ReceivedChunk | None
    received_ns: int
    cancelled: bool
    refusal: str = ""  # the server answered this very request with an error
    request: RequestId | None = None  # which of the requests in flight the chunk answers

    @property
    def timed_out(self) -> bool:
        return self.chunk is None and not self.cancelled and not self.refusal


@dataclass(frozen=True)
class Drops:
    """The chunks dropped so far: how many per reason code, and the latest explanation."""

    counts: dict[str, int]
    last: str

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class InFlight:
    """The request in flight, its hedge when one was sent, and the chunk answering either
    (thread-safe).

    The requester calls ``start`` before publishing (so a fast answer is never
    missed), then ``wait``; a late request may be hedged (``hedge``: the same
    observation sent to the standby session), and then the first valid chunk
    answering either is the answer, the other one's is dropped as
    ``hedge_lost`` when it comes. A refusal ends the wait only when every
    request of the race was refused. The chunk subscription calls
    ``offer_chunk``, or ``drop_chunk`` for a message that did not even decode.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._pending: list[RequestId] = []  # the request, then its hedge
        self._model: ValidatedModel | None = None
        self._answer: tuple[ReceivedChunk, int] | None = None  # (chunk, received monotonic ns)
        self._refusals: dict[
            str, str
        ] = {}  # session id -> the refusal of the race's request there
        self._answered: RequestId | None = None  # the request the answer is for
        self._raced: tuple[
            RequestId, ...
        ] = ()  # the latest race's requests, whose late chunks lost it
        self._cancelled = False
        self._dropped: Counter[str] = Counter()
        self._last_drop = ""

    def start(self, request: RequestId, model: ValidatedModel) -> None:
        """``request`` is now the one in flight; only a chunk of ``model`` may answer it."""
        with self._condition:
            self._pending, self._model = [request], model
            self._answer, self._refusals, self._cancelled = None, {}, False

    def hedge(self, request: RequestId) -> bool:
        """``request`` (the same observation, for the standby session) may answer too; False when
        the request
        in flight was answered, refused or cancelled meanwhile (then nothing is hedged)."""
        with self._condition:
            if not self._pending or self._answer is not None or self._cancelled or self._refusals:
                return False
            self._pending.append(request)
            return True

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None:
        """Accept ``chunk`` for the waiting requester, or drop it; returns the drop reason code.

        ``received_ns``: the monotonic clock when the chunk arrived.
        """
        with self._condition:
            verdict, answered = self._verdict(chunk)
            if verdict is not None:
                self.drop_chunk(*verdict)
                if verdict[0] == "refused" and answered is not None:
                    # It answers a request of the race with an error: once every one
                    # did, stop waiting now rather than at the request timeout.
                    self._refusals[answered.session_id] = verdict[1]
                    self._condition.notify_all()
                return verdict[0]
            self._answer = (chunk, received_ns)
            self._answered = answered
            self._condition.notify_all()
            return None

    def _verdict(self, chunk: ReceivedChunk) -> tuple[tuple[str, str] | None, RequestId | None]:
        got = chunk.request
        if any(_same_request(got, raced) for raced in self._raced):
            return (
                "hedge_lost",
                f"chunk for seq {got.seq} of session {got.session_id} came second in a "
                "hedged race; the first answer was merged",
            ), None
        if self._answer is not None:
            return ("late", "request already answered"), None
        # start() sets the model with the request: with nothing pending it is not read
        candidates = [
            pending for pending in self._pending if pending.session_id == got.session_id
        ] or self._pending[:1]
        pending = candidates[0] if candidates else None
        return rejection(chunk, pending, self._model), pending

    def drop_chunk(self, code: str, explanation: str) -> None:
        with self._condition:
            self._dropped[code] += 1
            self._last_drop = f"{code}: {truncated(explanation, MAX_DROP_EXPLANATION_CHARS)}"

    @property
    def hedged(self) -> bool:
        """Whether the request in flight was also sent to the standby (a race that may still be
        won)."""
        with self._condition:
            return len(self._pending) > 1 and self._answer is None and not self._cancelled

    @property
    def answered(self) -> bool:
        """Whether ``wait`` would return at once (a chunk, a refusal or a cancel is in)."""
        with self._condition:
            return self._answer is not None or self._all_refused() or self._cancelled

    def _all_refused(self) -> bool:
        return bool(self._refusals) and all(
            pending.session_id in self._refusals for pending in self._pending
        )

    def wait(self, timeout_s: float, end: bool = True) -> Answer | None:
        """The answer to the request in flight (or why there is none), ending the request.

        ``end`` False: a timeout returns None and leaves the request in flight (it may be hedged).
        """
        with self._condition:
            done = self._condition.wait_for(
                lambda: self._answer is not None or self._all_refused() or self._cancelled,
                timeout=timeout_s,
            )
            if not done and not end:
                return None
            answer, cancelled = self._answer, self._cancelled
            refusal = "; ".join(self._refusals.values()) if self._all_refused() else ""
            if len(self._pending) > 1:
                self._raced = tuple(self._pending)
            answered = self._answered
            self._pending, self._answer, self._refusals, self._answered = [], None, {}, None
            if answer is not None:
                return Answer(answer[0], answer[1], False, request=answered)
            return Answer(None, 0, cancelled, refusal)

    def cancel(self) -> None:
        """End the request in flight (reset, shutdown): its chunk, if it comes, is dropped."""
        with self._condition:
            self._pending, self._answer, self._refusals, self._answered = [], None, {}, None
            self._cancelled = True
            self._condition.notify_all()

    def drops(self) -> Drops:
        with self._condition:
            return Drops(dict(self._dropped), self._last_drop)


def _same_request(a: RequestId, b: RequestId) -> bool:
    return (a.session_id, a.seq, a.epoch, a.sent_monotonic_ns) == (
        b.session_id,
        b.seq,
        b.epoch,
        b.sent_monotonic_ns,
    )
