"""Which action chunks may be merged, and the one request they may answer.

Invariants (architecture §4):

* one request in flight: a chunk is merged only if it answers exactly the
  latest request — same session, seq, episode and connection epoch; anything
  else (late, stale, foreign) is dropped and counted with a reason;
* never a chunk from another model: its fingerprint and ordered action names
  must be the ones validated at session open;
* never a malformed chunk: shape [T >= 1, action_dim] in both spaces, every
  value finite, status OK.

Plain Python: the node's chunk callback hands decoded chunks to
``InFlight.offer``; the network worker waits in ``InFlight.wait``.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from lerobot_ros.contract import truncated
from lerobot_ros.data_plane import ReceivedChunk, RequestId

STATUS_OK = 0  # ActionChunk.STATUS_OK
#: A drop explanation echoes what the chunk carried (error text, names); a
#: forged chunk must not make it arbitrarily long.
MAX_DROP_EXPLANATION_CHARS = 1000


@dataclass(frozen=True)
class ValidatedModel:
    """What the first successful handshake validated; every chunk must match it."""

    fingerprint: str
    revision: str
    action_names: tuple[str, ...]

    def difference(self, other: ValidatedModel) -> str | None:
        """Why ``other`` (a re-handshaken server's model) is not this one, or None."""
        changes = []
        if other.fingerprint != self.fingerprint:
            changes.append(f"fingerprint {self.fingerprint!r} -> {other.fingerprint!r}")
        if other.revision != self.revision:
            changes.append(f"revision {self.revision!r} -> {other.revision!r}")
        if other.action_names != self.action_names:
            changes.append(f"action names {list(self.action_names)} -> {list(other.action_names)}")
        if not changes:
            return None
        return "the server now serves a different model (" + "; ".join(changes) + "): never executing its chunks"


def rejection(chunk: ReceivedChunk, pending: RequestId | None, model: ValidatedModel) -> tuple[str, str] | None:
    """(reason code, explanation) why ``chunk`` must not be merged, or None to merge it.

    ``pending`` is the request in flight (None: nothing is awaited, so any
    chunk is late).
    """
    got = chunk.request
    if pending is None:
        return "late", f"chunk for seq {got.seq} arrived with no request in flight"
    for field, code in (("session_id", "foreign_session"), ("client_id", "foreign_client"),
                        ("epoch", "stale_epoch"), ("episode", "stale_episode"), ("seq", "stale_seq")):
        if getattr(got, field) != getattr(pending, field):
            return code, f"chunk {field} {getattr(got, field)!r} does not answer the request in flight ({getattr(pending, field)!r})"
    if got.sent_monotonic_ns != pending.sent_monotonic_ns:
        return "stale_seq", "chunk echoes another send time than the request in flight"
    if chunk.status != STATUS_OK:
        return "refused", f"server answered status {chunk.status}: {chunk.error}"
    if chunk.model_fingerprint != model.fingerprint:
        return "wrong_model", f"chunk from model {chunk.model_fingerprint!r}, validated {model.fingerprint!r}"
    if tuple(chunk.action_names) != model.action_names:
        return "wrong_action_names", f"chunk columns {list(chunk.action_names)}, validated {list(model.action_names)}"
    dim = len(model.action_names)
    for name, actions in (("actions_robot", chunk.actions_robot), ("actions_model", chunk.actions_model)):
        if actions.ndim != 2 or actions.shape[0] < 1 or actions.shape[1] != dim:
            return "bad_shape", f"{name} has shape {actions.shape}, expected [T >= 1, {dim}]"
        if not np.all(np.isfinite(actions)):
            return "non_finite", f"{name} holds non-finite values"
    return None


@dataclass(frozen=True)
class Answer:
    """What ``InFlight.wait`` returns: the chunk, or None (refused, timed out, or cancelled)."""

    chunk: ReceivedChunk | None
    received_ns: int
    cancelled: bool
    refusal: str = ""  # the server answered this very request with an error

    @property
    def timed_out(self) -> bool:
        return self.chunk is None and not self.cancelled and not self.refusal


class InFlight:
    """The one request in flight and the chunk answering it (thread-safe).

    The worker calls ``start`` before publishing (so a fast answer is never
    missed), then ``wait``; the chunk subscription calls ``offer``.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._pending: RequestId | None = None
        self._answer: tuple[ReceivedChunk, int] | None = None  # (chunk, received monotonic ns)
        self._refusal = ""
        self._cancelled = False
        self.dropped: Counter[str] = Counter()
        self.last_drop = ""

    @property
    def pending(self) -> RequestId | None:
        with self._condition:
            return self._pending

    def start(self, request: RequestId) -> None:
        with self._condition:
            self._pending, self._answer, self._refusal, self._cancelled = request, None, "", False

    def offer(self, chunk: ReceivedChunk, model: ValidatedModel, received_ns: int) -> str | None:
        """Accept ``chunk`` for the waiting worker, or drop it; returns the drop reason code.

        ``received_ns``: the executor's monotonic clock when the chunk arrived.
        """
        with self._condition:
            verdict = rejection(chunk, self._pending, model) if self._answer is None else ("late", "request already answered")
            if verdict is not None:
                self.drop(*verdict)
                if verdict[0] == "refused":
                    # It answers the request in flight, with an error: stop
                    # waiting now rather than at the request timeout.
                    self._refusal = verdict[1]
                    self._condition.notify_all()
                return verdict[0]
            self._answer = (chunk, received_ns)
            self._condition.notify_all()
            return None

    def drop(self, code: str, explanation: str) -> None:
        with self._condition:
            self.dropped[code] += 1
            self.last_drop = f"{code}: {truncated(explanation, MAX_DROP_EXPLANATION_CHARS)}"

    def wait(self, timeout_s: float) -> Answer:
        """The answer to the request in flight (or why there is none); ends the request."""
        with self._condition:
            self._condition.wait_for(
                lambda: self._answer is not None or self._refusal or self._cancelled, timeout=timeout_s
            )
            answer, cancelled, refusal = self._answer, self._cancelled, self._refusal
            self._pending, self._answer, self._refusal = None, None, ""
            if answer is not None:
                return Answer(answer[0], answer[1], False)
            return Answer(None, 0, cancelled, refusal)

    def cancel(self) -> None:
        """End the request in flight (reset, shutdown): its chunk, if it comes, is dropped."""
        with self._condition:
            self._pending, self._answer, self._refusal, self._cancelled = None, None, "", True
            self._condition.notify_all()

    @property
    def dropped_total(self) -> int:
        with self._condition:
            return sum(self.dropped.values())
