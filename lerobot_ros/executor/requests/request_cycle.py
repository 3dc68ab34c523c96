"""The request cycle: the one request in flight, its numbering, its answer's wait, and the
trigger that says when the next one leaves.

Owns the request in flight (``answer_rules.InFlight``, with a hedge when one
races it), the sequence number, the windowed round trip (``latency.py``), the
request threshold (``protocol/trigger.py``), the latest reason a request could
not be sent or was refused, and the request counters. Invariants enforced here:

* one request goes through one sequence: it is numbered and put in flight
  before it is published (so only its chunk may answer it), then either its
  answer is merged, or its refusal or timeout is counted;
* the next request is due only when the queued playback time is at most the
  threshold: ``buffer_time_s``, or more when the round trip (and, with a
  standby, the hedge allowance) needs it; it is recomputed at every merge and
  every change of session or standby;
* the RTC delay sent with a request is the windowed round trip in control
  steps, and the prefix is the queue's unexecuted rows when it left.

Not thread-safe except ``InFlight`` (which the chunk subscription and the
waiting worker share): the executor core calls the rest under its one lock.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from lerobot_ros.executor.control.action_queue import QueueSnapshot
from lerobot_ros.executor.requests.answer_rules import Answer, Drops, InFlight, ValidatedModel
from lerobot_ros.executor.requests.latency import WindowedLatencyTracker, control_steps
from lerobot_ros.executor.requests.observation_assembly import AssembledObservation, NotSent
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.session_state import SessionIdentity
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.protocol.trigger import request_threshold_s
from lerobot_ros.protocol.wire.data_plane import ReceivedChunk, RequestId

#: The request cycle's counters since start-up, named as in ExecutorTelemetry.
REQUEST_COUNTERS = (
    "requests_sent",
    "chunks_merged",
    "request_timeouts",
    "observations_too_old",
    "request_rejections",
)


def request_due(queued_time_s: float, buffer_time_s: float) -> bool:
    """The trigger rule: ask for the next chunk when the queue covers at most the buffer time."""
    return queued_time_s <= buffer_time_s


class RequestCycle:
    """One request in flight at a time, and when the next one is due."""

    def __init__(self, settings: ExecutorSettings) -> None:
        self._settings = settings
        self._in_flight = InFlight()
        self._latency = WindowedLatencyTracker()
        self._seq = 0
        self._threshold_s = self.threshold(chunk_size=0, hedge_allowance_s=0.0)
        self._last_problem = ""  # the latest reason a request could not be sent
        self._last_rejection = ""  # the server's latest reason for refusing one, as it said it
        self._counts: Counter[str] = Counter()

    def change_settings(self, settings: ExecutorSettings) -> None:
        self._settings = settings

    # ------------------------------------------------------------------ trigger

    def threshold(
        self, chunk_size: int, hedge_allowance_s: float, replace_mode: bool = False
    ) -> float:
        """The queued playback time at which a request is due (``trigger.request_threshold_s``)."""
        settings = self._settings
        return request_threshold_s(
            settings.buffer_time_s,
            self._latency.p95,
            settings.request_latency_margin,
            settings.fps,
            chunk_size,
            settings.max_action_age_s,
            replace_mode,
            hedge_allowance_s=hedge_allowance_s,
        )

    def retarget(self, chunk_size: int, rtc: bool, hedge_allowance_s: float) -> None:
        """Recompute the threshold: after a merge, a session opening, a standby change."""
        self._threshold_s = self.threshold(chunk_size, hedge_allowance_s, rtc)

    @property
    def threshold_s(self) -> float:
        return self._threshold_s

    def due(self, queued_time_s: float) -> bool:
        return request_due(queued_time_s, self._threshold_s)

    # ------------------------------------------------------------------ a request

    def not_sent(self, why: NotSent) -> None:
        """No request could be assembled (``why``: a sensor missing or too old)."""
        if why.too_old:
            self._counts["observations_too_old"] += 1
        self._last_problem = why.reason

    def number(
        self,
        observation: AssembledObservation,
        now_ns: int,
        session_id: str,
        epoch: int,
        replica: str,
        identity: SessionIdentity,
        task: str,
        queue: QueueSnapshot,
    ) -> PendingRequest:
        """A request of ``observation`` for one session: ids, the queue ``snapshot`` it leaves
        with (its RTC prefix), the delay."""
        settings = self._settings
        if identity.policy_cameras is not None:
            # Only what the policy reads (assembled that way; filtered again in case a
            # re-handshake changed the session meanwhile): a robot may have more cameras.
            observation = dataclasses.replace(
                observation,
                cameras={
                    n: f for n, f in observation.cameras.items() if n in identity.policy_cameras
                },
            )
        mapping = settings.mapping
        # The policy reads its own units (joint_mapping.py).
        if mapping.changes_units:
            observation = dataclasses.replace(
                observation, state=mapping.state_to_policy(observation.state)
            )
        rtc = identity.rtc_active
        delay = self._latency.delay_steps(settings.fps) if rtc else 0
        self._seq += 1
        request = RequestId(
            session_id, settings.client_id, self._seq, identity.episode, epoch, now_ns
        )
        self._counts["requests_sent"] += 1
        return PendingRequest(
            request,
            observation,
            queue,
            delay,
            rtc,
            task,
            settings.jpeg_quality,
            identity.camera_sizes if settings.resize_to_policy else None,
            mapping,
            replica,
        )

    def start(self, pending: PendingRequest, model: ValidatedModel) -> None:
        """``pending`` is in flight from now on: only its chunk may answer."""
        self._in_flight.start(pending.request, model)

    def hedge(self, pending: PendingRequest) -> bool:
        """``pending`` races the request in flight (a hedge to the standby); False when the
        request was answered meanwhile: then ``pending`` is withdrawn, its number unused."""
        if self._in_flight.hedge(pending.request):
            return True
        self._seq -= 1
        self._counts["requests_sent"] -= 1
        return False

    @property
    def hedge_racing(self) -> bool:
        return self._in_flight.hedged

    def give_up(self) -> None:
        """End the request in flight (and its hedge): the waiter returns at once, a late chunk
        is dropped."""
        self._in_flight.cancel()

    def not_published(self, problem: str) -> None:
        """The worker could not publish the request in flight."""
        self._in_flight.cancel()
        self._last_problem = problem

    def note_problem(self, problem: str) -> None:
        """Why the robot could not do what it tried (for ~/status)."""
        self._last_problem = problem

    # ------------------------------------------------------------------ its answer

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None:
        return self._in_flight.offer_chunk(chunk, received_ns)

    def drop_chunk(self, code: str, explanation: str) -> None:
        self._in_flight.drop_chunk(code, explanation)

    def wait(self, timeout_s: float, end: bool = True) -> Answer | None:
        """The answer to the request in flight, or why there is none (``InFlight.wait``)."""
        return self._in_flight.wait(timeout_s, end=end)

    def answered(self, request: RequestId, received_ns: int) -> int:
        """The answer to ``request`` is merged: its round trip joins the window; returns it in
        control steps (the delay the merge trims)."""
        latency_s = max(0.0, (received_ns - request.sent_monotonic_ns) / 1e9)
        self._latency.add(latency_s)
        self._counts["chunks_merged"] += 1
        return control_steps(latency_s, self._settings.fps)

    def failed(self, refusal: str = "") -> None:
        """A timeout, or the server answered with an error (REJECTED/FAILED)."""
        if refusal:
            self._last_problem = f"server refused the request: {refusal}"
            self._last_rejection = refusal
            self._counts["request_rejections"] += 1
        else:
            self._counts["request_timeouts"] += 1

    # ------------------------------------------------------------------ readers

    @property
    def latency(self) -> WindowedLatencyTracker:
        """The windowed round trip (thread-safe itself: read it outside the core's lock)."""
        return self._latency

    @property
    def last_problem(self) -> str:
        return self._last_problem

    @property
    def last_rejection(self) -> str:
        return self._last_rejection

    def drops(self) -> Drops:
        return self._in_flight.drops()

    def count(self, name: str) -> int:
        return self._counts[name]
