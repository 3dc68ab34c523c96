"""A scripted robot on the executor's own request path: what the benchmarks and test robots send.

A scripted robot has no control loop and no sensors: its joint state and
camera frames are fixed or generated per request, and it keeps one request
in flight. Everything between "an observation is ready" and "its chunk is
merged" is the executor's own code, so a benchmark cannot drift from what a
robot runs:

* the session is opened, its data plane matched, every observation signed
  and every chunk matched to its request by the product's ``SessionClient``;
* each request is a ``PendingRequest`` numbered as ``ExecutorCore._numbered``
  numbers it (``ScriptedRequests.numbered`` mirrors it: the policy's cameras
  only, the queue snapshot capped to the RTC horizon or the chunk, the RTC
  delay from the windowed p95 round trip, seq + 1, the session's task, the
  policy's camera sizes), and what goes on the wire is ``pending.outgoing()``
  (the one place an ``OutgoingObservation`` is built), made a message as the
  executor's ``ServerLink.send_observation`` makes it;
* the answer is merged into an ``ActionQueue`` as ``ExecutorCore.merge``
  merges it (the delay in control steps of this round trip, the read index of
  the snapshot taken before the request, the source time of the observation).

With no control loop nothing pops the queue by itself: ``plays`` says how
many rows the robot plays before each request (a benchmark's model of the
rows executed meanwhile).

This module imports no other benchmark module (``bench.common`` isolates the
ROS graph at import), so the test helpers import it too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from lerobot_ros.executor.control.action_queue import ActionQueue, QueueSnapshot
from lerobot_ros.executor.requests.answer_rules import Answer
from lerobot_ros.executor.requests.latency import WindowedLatencyTracker, control_steps
from lerobot_ros.executor.requests.observation_assembly import AssembledObservation
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.handshake_types import SessionGrant
from lerobot_ros.msg import Observation
from lerobot_ros.protocol.contract import OpenRequest
from lerobot_ros.protocol.wire.data_plane import ReceivedChunk, RequestId, observation_to_msg
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES

#: The executor's default jpeg_quality.
JPEG_QUALITY = 90
#: Before the first merge (or without a queue): nothing queued, no prefix.
EMPTY_SNAPSHOT = QueueSnapshot(0, None, None)

State = np.ndarray | Callable[[int], np.ndarray]  # fixed, or generated from the request's seq
Cameras = Mapping | Callable[[int], Mapping]  # camera name -> Image or CompressedImage


def message_of(pending: PendingRequest) -> Observation:
    """The Observation message of ``pending``, as the executor's ``ServerLink`` builds it
    (unsigned: the session client signs it when it sends it)."""
    return observation_to_msg(pending.outgoing())


def plain_request(
    request: RequestId,
    state,
    cameras: Mapping,
    task: str = "",
    jpeg_quality: int = JPEG_QUALITY,
    inference_delay_steps: int = 0,
    prefix: tuple[np.ndarray, np.ndarray] | None = None,
) -> PendingRequest:
    """A request whose ids the caller chose (a test names its seq and episode), without a queue.

    ``prefix`` (model space, robot space): the RTC prefix to send, as if the queue held exactly
    these rows; RTC is off without one (the delay is still sent as given).
    """
    snapshot = EMPTY_SNAPSHOT if prefix is None else QueueSnapshot(0, *prefix)
    return PendingRequest(
        request,
        AssembledObservation(np.asarray(state, np.float32), dict(cameras), 0.0),
        snapshot,
        inference_delay_steps,
        prefix is not None,
        task,
        jpeg_quality,
    )


class ScriptedRequests:
    """A robot's numbering and merging, as the executor core does them; no ROS, no server.

    ``queue``: where answers are merged (None: answers are not merged; the
    snapshot is empty and no prefix is sent). ``delay_steps``: the RTC delay
    declared with each request; None: the executor's, ceil(p95 round trip x
    fps) over the latest ``latency_window`` round trips.
    """

    def __init__(
        self,
        client_id: str,
        fps: float = 30.0,
        task: str = "",
        jpeg_quality: int = JPEG_QUALITY,
        queue: ActionQueue | None = None,
        delay_steps: int | None = None,
        resize_to_policy: bool = True,
        latency_window: int = 50,
    ) -> None:
        self.client_id, self.fps, self.task = client_id, fps, task
        self.jpeg_quality, self.queue, self.fixed_delay = jpeg_quality, queue, delay_steps
        self.resize_to_policy = resize_to_policy
        self.latency = WindowedLatencyTracker(latency_window)
        self.grant: SessionGrant | None = None
        self.seq, self.episode, self.epoch = 0, 0, 0
        self.last_delay_steps = 0  # the round trip of the latest merge, in control steps

    def opened(self, grant: SessionGrant) -> None:
        """A session is open (a re-opened one counts a new epoch, as the executor's does)."""
        if self.grant is not None:
            self.epoch += 1
        self.grant = grant

    @property
    def session_id(self) -> str:
        return self.grant.session_id if self.grant is not None else ""

    @property
    def rtc(self) -> bool:
        """Whether the server granted RTC (what the executor sends prefixes by)."""
        return self.grant is not None and self.grant.rtc_enabled

    def numbered(self, state, cameras: Mapping, now_ns: int | None = None) -> PendingRequest:
        """The next request of this observation (``ExecutorCore._numbered``, no joint mapping)."""
        if self.grant is None:
            raise RuntimeError("no session is open: open one before numbering requests")
        capabilities = self.grant.capabilities
        policy_cameras = frozenset(capabilities.camera_names)
        observation = AssembledObservation(
            np.asarray(state, np.float32),
            {name: frame for name, frame in cameras.items() if name in policy_cameras},
            0.0,  # scripted: always fresh
        )
        rtc = self.rtc
        snapshot = (
            self.queue.snapshot(
                max_steps=capabilities.rtc_execution_horizon or capabilities.chunk_size
            )
            if self.queue is not None
            else EMPTY_SNAPSHOT
        )
        if not rtc:
            delay = 0
        elif self.fixed_delay is not None:
            delay = self.fixed_delay
        else:
            delay = self.latency.delay_steps(self.fps)
        self.seq += 1
        request = RequestId(
            self.session_id,
            self.client_id,
            self.seq,
            self.episode,
            self.epoch,
            time.monotonic_ns() if now_ns is None else now_ns,
        )
        return PendingRequest(
            request,
            observation,
            snapshot,
            delay,
            rtc,
            self.task,
            self.jpeg_quality,
            capabilities.camera_sizes if self.resize_to_policy else None,
        )

    def merge(self, pending: PendingRequest, chunk: ReceivedChunk, received_ns: int) -> int | None:
        """Merge the chunk answering ``pending`` (``ExecutorCore.merge``); the rows trimmed, or
        None without a queue. The round trip counts toward the RTC delay either way."""
        request = pending.request
        latency_s = max(0.0, (received_ns - request.sent_monotonic_ns) / 1e9)
        self.latency.add(latency_s)
        self.last_delay_steps = control_steps(latency_s, self.fps)
        if self.queue is None:
            return None
        return self.queue.merge(
            chunk.actions_model,
            chunk.actions_robot,
            real_delay=self.last_delay_steps,
            action_index_before_inference=pending.snapshot.action_index,
            source_time_s=request.sent_monotonic_ns / 1e9 - pending.observation.oldest_age_s,
        )

    def play(self, rows: int) -> int:
        """Pop up to ``rows`` actions, as the control loop would; how many were popped."""
        played = 0
        while self.queue is not None and played < rows and self.queue.get() is not None:
            played += 1
        return played


@dataclass
class Exchange:
    """One request and its answer, with the executor's own timestamps (monotonic ns)."""

    pending: PendingRequest
    message: Observation  # as published (signed)
    encoded_ns: int  # ``outgoing()`` and the message built; the publish follows
    answer: Answer
    merged_ns: int = 0  # 0: not merged (no answer)
    trimmed: int | None = None  # rows the merge trimmed; None: not merged into a queue

    @property
    def request(self) -> RequestId:
        return self.pending.request

    @property
    def sent_ns(self) -> int:
        """When the request was numbered (its ``sent_monotonic_ns``)."""
        return self.pending.request.sent_monotonic_ns

    @property
    def received_ns(self) -> int:
        """When the chunk callback received the answer (0: none)."""
        return self.answer.received_ns

    @property
    def chunk(self) -> ReceivedChunk | None:
        return self.answer.chunk

    @property
    def encode_s(self) -> float:
        return (self.encoded_ns - self.sent_ns) / 1e9

    @property
    def round_trip_s(self) -> float:
        """Numbered -> the chunk callback (what the executor's latency tracker adds)."""
        return (self.received_ns - self.sent_ns) / 1e9


def every(period_s: float) -> Callable[[], float]:
    """When each request of a robot asking once per ``period_s`` leaves (monotonic s): on a
    fixed grid from the first, a late one leaving at once without moving the grid."""
    due = [None]

    def next_due() -> float:
        now = time.monotonic()
        this = now if due[0] is None else due[0]
        due[0] = max(this + period_s, now)
        return this

    return next_due


class ScriptedRobot:
    """One scripted robot's session with the server under ``namespace``, one request in flight.

    ``state`` and ``cameras``: fixed, or functions of the request's seq. ``queue``: merge each
    answer into an ``ActionQueue`` (replace mode when the server grants RTC, append otherwise);
    ``plays(queued)``: rows played before each request given the rows queued (default none).
    ``spinning``: another thread spins ``node`` (a load client's spinner); otherwise each request
    spins it while it waits. ``session``: a session client made already (node and namespace are
    then not used).
    """

    def __init__(
        self,
        node,
        namespace: str,
        client_id: str,
        state: State,
        cameras: Cameras,
        action_names=SO101_JOINT_NAMES,
        fps: float = 30.0,
        task: str = "",
        rtc: bool = False,
        jpeg_quality: int = JPEG_QUALITY,
        queue: bool = True,
        delay_steps: int | None = None,
        resize_to_policy: bool = True,
        plays: Callable[[int], int] | None = None,
        spinning: bool = False,
        request_timeout_s: float = 60.0,
        session=None,
    ) -> None:
        from lerobot_ros.executor.session.session_client import SessionClient

        self.client_id, self.state, self.cameras = client_id, state, cameras
        self.action_names, self.fps, self.rtc_requested = tuple(action_names), fps, rtc
        self.plays, self.request_timeout_s = plays, request_timeout_s
        # ``session``: a client made already (a subclass a test records with, or a fake)
        self.session = (
            session if session is not None else SessionClient(node, namespace, client_id)
        )
        self.session.spinning = spinning
        self.requests = ScriptedRequests(
            client_id,
            fps,
            task,
            jpeg_quality,
            ActionQueue(rtc_enabled=False) if queue else None,
            delay_steps,
            resize_to_policy,
        )
        self.exchanges: list[Exchange] = []  # kept by the sending thread (``start``)
        self.failures: list[tuple[int, str]] = []  # (monotonic ns, why no chunk)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ----------------------------------------------------------- session

    def open_request(self) -> OpenRequest:
        return OpenRequest(
            client_id=self.client_id,
            schema_version=Observation.CURRENT_SCHEMA_VERSION,
            action_names=self.action_names,
            state_dim=len(self.action_names),
            camera_names=tuple(self._cameras(0)),
            fps=float(self.fps),
            task=self.requests.task,
            rtc_requested=self.rtc_requested,
        )

    def open(self, timeout_s: float = 30.0, attempts: int = 1) -> SessionGrant:
        """Open the session (asked again while unanswered, up to ``attempts`` times: on an
        overloaded machine an OpenSession can go unanswered, and a re-open replaces it); the
        grant, or RuntimeError with the refusal."""
        for _ in range(attempts):
            grant = self.session.open_session(self.open_request(), timeout_s=timeout_s)
            if not isinstance(grant, str) or "did not reply" not in grant:
                break
        if isinstance(grant, str):
            raise RuntimeError(f"{self.client_id}: no session: {grant}")
        queue = self.requests.queue
        if queue is not None and queue.rtc_enabled != grant.rtc_enabled:
            # the executor's merge mode follows the grant (a new queue when it changes)
            self.requests.queue = ActionQueue(rtc_enabled=grant.rtc_enabled)
        self.requests.opened(grant)
        return grant

    @property
    def session_id(self) -> str:
        return self.requests.session_id

    @property
    def queue(self) -> ActionQueue | None:
        return self.requests.queue

    def close(self, timeout_s: float = 10.0, paused=None) -> None:
        """Stop sending, close the session and destroy the client's entities; ``paused``: a
        context manager holding the node's spinner meanwhile (rclpy refuses entities destroyed
        while another thread waits on them)."""
        self.stop()
        if self.session_id:
            self.session.close_session(self.session_id, timeout_s=timeout_s)
        if paused is None:
            self.session.destroy()
        else:
            with paused():
                self.session.destroy()

    # ---------------------------------------------------------- requests

    def _cameras(self, seq: int) -> Mapping:
        return self.cameras(seq) if callable(self.cameras) else self.cameras

    def request(self, state=None, cameras=None) -> Exchange:
        """One request (its state and frames the script's, unless given) and its answer, merged."""
        if self.plays is not None and self.requests.queue is not None:
            self.requests.play(self.plays(self.requests.queue.qsize()))
        seq = self.requests.seq + 1
        if state is None:
            state = self.state(seq) if callable(self.state) else self.state
        pending = self.requests.numbered(
            state, cameras if cameras is not None else self._cameras(seq)
        )
        msg = message_of(pending)
        encoded = time.monotonic_ns()
        answer = self.session.request_chunk(pending.request, msg, self.request_timeout_s)
        exchange = Exchange(pending, msg, encoded, answer)
        if answer.chunk is not None:
            exchange.trimmed = self.requests.merge(pending, answer.chunk, answer.received_ns)
            exchange.merged_ns = time.monotonic_ns()
        return exchange

    # ------------------------------------------------------------ sending

    def send_loop(
        self,
        stop: threading.Event,
        due: Callable[[], float] | None = None,
        on_exchange: Callable[[Exchange], None] | None = None,
    ) -> None:
        """Send until ``stop``: closed loop (the next request as soon as the answer is in) or,
        with ``due``, each request at ``due()`` (monotonic s). Answers go to ``exchanges`` (or
        ``on_exchange``), requests left unanswered to ``failures``."""
        while True:
            if due is None:
                if stop.is_set():
                    return
            elif stop.wait(max(0.0, due() - time.monotonic())):
                return
            exchange = self.request()
            if exchange.chunk is None:
                why = exchange.answer.refusal or f"no chunk within {self.request_timeout_s:g} s"
                self.failures.append((time.monotonic_ns(), why))
            elif on_exchange is not None:
                on_exchange(exchange)
            else:
                self.exchanges.append(exchange)

    def start(self, period_s: float = 0.0, on_exchange=None) -> None:
        """Send on a thread of its own: closed loop (``period_s`` 0) or once per ``period_s``."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.send_loop,
            args=(self._stop, every(period_s) if period_s else None, on_exchange),
            name=self.client_id,
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> None:
        """End the sending thread after its request in flight (bounded by the request timeout)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(
                timeout=self.request_timeout_s + 10.0 if timeout_s is None else timeout_s
            )
            self._thread = None
