"""A robot's end of the session protocol with one policy server, over ROS (torch-free).

The executor talks to its server through it, and so do the benchmarks and
the test robots: GetStatus, OpenSession and the session's data plane,
observations out, the chunk answering each request in, ResetEpisode,
CloseSession. Invariants:

* ``open_session`` returns only once the session's data plane is matched both
  ways: the topics are volatile, and an observation published earlier is lost
  (a whole request timeout); a granted session this client cannot use (its
  data plane never matched) is closed at once, not left holding a server slot
  until the idle timeout;
* a chunk answers a request only if it matches it exactly (session, client,
  seq, episode, epoch, send time, model: ``chunks.InFlight``); every chunk
  message goes to one sink, and one that does not even decode is dropped
  there as ``malformed``;
* OpenSession is never re-sent (a second one would replace the session the
  first opened); the idempotent calls are re-sent every ``RESEND_S`` until
  answered, since a request sent just as a service is discovered can be lost;
* the secret of each granted session (OpenSession reply) is kept by this
  client for as long as it lives, so every re-open presents the latest one as
  proof of ownership, close and reset present their session's, every
  observation is signed with it and every chunk must verify with it
  (``data_plane.integrity``); a chunk that does not is dropped as
  ``unauthenticated`` before it is decoded. The secret is never logged.

Calls are ``call_async`` plus a bounded wait: while nothing spins the node the
wait spins it itself; once an executor spins it (``spinning``) the calling
thread only waits, and ``stopping`` ends every wait early.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import rclpy
from rclpy.node import Node
from rclpy.task import Future

from lerobot_ros.executor.requests.answer_rules import Answer, InFlight, ValidatedModel
from lerobot_ros.executor.session.handshake_types import ServerView, SessionGrant
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol import names
from lerobot_ros.protocol.contract import OpenRequest
from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS
from lerobot_ros.protocol.wire import control_plane
from lerobot_ros.protocol.wire.data_plane import (
    DataPlaneError,
    ReceivedChunk,
    RequestId,
    chunk_from_msg,
    integrity,
)
from lerobot_ros.srv import CloseSession, GetStatus, OpenSession, ResetEpisode

MATCH_POLL_S = 0.01
STOP_POLL_S = 0.1
SPIN_POLL_S = 0.01
CLOSE_UNUSED_TIMEOUT_S = 2.0
#: Sessions whose secret is kept: the current one, and the one before (its late chunks still
#: verify).
KEPT_SECRETS = 2

#: How often an unanswered idempotent service request is sent again (seconds).
RESEND_S = 0.5


class ChunkSink(Protocol):
    """Where decoded chunks go: the executor core, or a standalone client's own ``InFlight``."""

    def offer_chunk(self, chunk: ReceivedChunk, received_ns: int) -> str | None: ...

    def drop_chunk(self, code: str, explanation: str) -> None: ...


def deliver_chunk(msg: ActionChunk, sink: ChunkSink, received_ns: int) -> str | None:
    """Decode one chunk message and hand it to ``sink``; returns the drop reason code, if
    dropped."""
    try:
        chunk = chunk_from_msg(msg)
    except DataPlaneError as error:
        sink.drop_chunk("malformed", str(error))
        return "malformed"
    return sink.offer_chunk(chunk, received_ns)


def grant_of(response: OpenSession.Response) -> SessionGrant:
    """An accepted OpenSession response as plain values."""
    return SessionGrant(
        session_id=response.session_id,
        rtc_enabled=response.rtc_enabled,
        observation_topic=response.observation_topic,
        action_chunk_topic=response.action_chunk_topic,
        capabilities=control_plane.capabilities_from_msg(response.capabilities),
        warnings=tuple(response.warnings),
        idle_timeout_s=response.session_idle_timeout_s,
    )


class SessionClient:
    """One client id's conversation with the server under ``server_namespace``.

    ``sink`` receives every chunk (the executor passes its core); without
    one the client matches chunks itself, and ``request`` waits on that.
    """

    def __init__(
        self,
        node: Node,
        server_namespace: str,
        client_id: str,
        sink: ChunkSink | None = None,
        callback_group=None,
    ) -> None:
        self.node, self.client_id = node, client_id
        self._own_answers = InFlight() if sink is None else None
        self._sink: ChunkSink = sink if sink is not None else self._own_answers

        def client(kind, name):
            return node.create_client(
                kind, names.in_namespace(server_namespace, name), callback_group=callback_group
            )

        self._get_status = client(GetStatus, names.GET_STATUS)
        self._open = client(OpenSession, names.OPEN_SESSION)
        self._close = client(CloseSession, names.CLOSE_SESSION)
        self._reset = client(ResetEpisode, names.RESET_EPISODE)
        self._publisher = None
        self._subscription = None
        # of the latest connected session (the own matcher's)
        self._model: ValidatedModel | None = None
        self._secrets: dict[str, str] = {}  # session id -> its secret, the latest granted last
        self.spinning = False  # set once an executor spins the node
        self.stopping = threading.Event()  # set on shutdown: every wait ends early

    # ----------------------------------------------------------- services

    def wait_for_server(self, timeout_s: float) -> bool:
        """Whether the server's GetStatus service appeared within ``timeout_s``."""
        return self._get_status.wait_for_service(timeout_sec=timeout_s)

    def discovered(self) -> bool:
        """Whether this process knows the server's GetStatus service now (no waiting)."""
        return self._get_status.service_is_ready()

    def get_status(self, timeout_s: float, wait_only: bool = False) -> ServerView | str:
        """The server's status, or why there is none. ``wait_only``: another thread spins the node
        meanwhile (a status round of several replicas), so this one only waits for the answer."""
        response = self._call(
            self._get_status, GetStatus.Request(), timeout_s, idempotent=True, wait_only=wait_only
        )
        if isinstance(response, str):
            return response
        status = response.status
        return ServerView(
            status.ready,
            status.instance_id,
            control_plane.capabilities_from_msg(status.capabilities),
            draining=status.draining,
            active_sessions=status.active_sessions,
            max_sessions=status.max_sessions,
            pending_requests=status.pending_requests,
            standby_sessions=status.standby_sessions,
            headroom_robots=status.headroom_robots,
            predicted_p95_ms=status.predicted_p95_ms,
            latency_budget_ms=status.latency_budget_ms,
        )

    def request_session(
        self, request: OpenSession.Request, timeout_s: float
    ) -> OpenSession.Response | str:
        """The bare OpenSession call: the server's answer, accepted or not (no data plane yet).

        Presents the latest granted session's secret unless ``request`` carries one.
        """
        if not request.owner_secret and self._secrets:
            request.owner_secret = self.owner_secret
        response = self._call(self._open, request, timeout_s)
        if not isinstance(response, str) and response.accepted:
            self._secrets.pop(response.session_id, None)
            self._secrets[response.session_id] = response.session_secret
            while len(self._secrets) > KEPT_SECRETS:
                del self._secrets[next(iter(self._secrets))]
        return response

    @property
    def owner_secret(self) -> str:
        """The latest granted session's secret ("" before the first grant)."""
        return next(reversed(self._secrets.values()), "")

    def secret_of(self, session_id: str) -> str:
        return self._secrets.get(session_id, "")

    def open_session(
        self,
        request: OpenRequest,
        timeout_s: float,
        check: Callable[[SessionGrant], str | None] | None = None,
    ) -> SessionGrant | str:
        """Open a session and match its data plane; the grant, or why there is none.

        ``check`` vets the grant before its data plane is built (the executor
        checks the model again); its reason refuses the grant.
        """
        response = self.request_session(control_plane.open_request_to_msg(request), timeout_s)
        if isinstance(response, str):
            return response
        if not response.accepted:
            return f"session refused: {response.message}"
        grant = grant_of(response)
        for warning in grant.warnings:
            self.node.get_logger().warning(f"server: {warning}")
        return (
            (check(grant) if check is not None else None)
            or self.connect_data_plane(grant, timeout_s)
            or grant
        )

    def reset_episode(
        self, session_id: str, episode: int, timeout_s: float
    ) -> ResetEpisode.Response | str:
        return self._call(
            self._reset, self._reset_request(session_id, episode), timeout_s, idempotent=True
        )

    async def reset_episode_async(
        self, session_id: str, episode: int, timeout_s: float
    ) -> ResetEpisode.Response | None:
        """For a coroutine callback of the spinning node: the answer, or None after
        ``timeout_s``."""
        future = self._reset.call_async(self._reset_request(session_id, episode))
        # Await a future of our own that the answer or the timeout resolves,
        # whichever comes first: awaiting a cancelled call future never ends
        # on older rclpy releases (Jazzy).
        outcome = Future()
        future.add_done_callback(lambda done: outcome.done() or outcome.set_result(done.result()))
        timer = self.node.create_timer(
            timeout_s, lambda: outcome.done() or outcome.set_result(None)
        )
        try:
            answer = await outcome
        finally:
            self.node.destroy_timer(timer)
        if not future.done():
            self._reset.remove_pending_request(future)
        return answer

    def close_session(
        self,
        session_id: str,
        timeout_s: float,
        spin_once: Callable[[], None] | None = None,
        keep_data_plane: bool = False,
    ) -> CloseSession.Response | str:
        """Close the session; its data plane goes first, unless ``keep_data_plane`` (a thread other
        than the spinning executor's closes it: entities are not destroyed under a spin; a later
        session reuses them). ``spin_once``: how to spin a node whose executor no longer runs (a
        drain)."""
        if not keep_data_plane:
            self.disconnect()
        return self._call(
            self._close, self._close_request(session_id), timeout_s, spin_once=spin_once
        )

    def _close_request(self, session_id: str) -> CloseSession.Request:
        return CloseSession.Request(
            client_id=self.client_id,
            session_id=session_id,
            session_secret=self.secret_of(session_id),
        )

    def _reset_request(self, session_id: str, episode: int) -> ResetEpisode.Request:
        return ResetEpisode.Request(
            client_id=self.client_id,
            session_id=session_id,
            episode=episode,
            session_secret=self.secret_of(session_id),
        )

    def _call(
        self,
        client,
        request,
        timeout_s: float,
        idempotent: bool = False,
        spin_once: Callable[[], None] | None = None,
        wait_only: bool = False,
    ):
        """The response, or the reason there is none (text)."""
        deadline = time.monotonic() + timeout_s
        if not client.wait_for_service(timeout_sec=timeout_s):
            return f"no policy server answered on {client.srv_name} within {timeout_s:g} s"
        while True:
            attempt_end = min(deadline, time.monotonic() + RESEND_S) if idempotent else deadline
            future = client.call_async(request)
            self._wait(future, attempt_end, spin_once, wait_only)
            if future.done() and future.result() is not None:
                return future.result()
            future.cancel()
            client.remove_pending_request(future)
            if self.stopping.is_set():
                return f"{client.srv_name}: shutting down"
            if time.monotonic() >= deadline:
                return f"{client.srv_name} did not reply within {timeout_s:g} s"

    def _wait(
        self,
        future: Future,
        until: float,
        spin_once: Callable[[], None] | None,
        wait_only: bool = False,
    ) -> None:
        if spin_once is not None:
            while not future.done() and time.monotonic() < until:
                spin_once()
        elif self.spinning or wait_only:
            done = threading.Event()
            future.add_done_callback(lambda _: done.set())
            while not done.is_set() and not self.stopping.is_set() and time.monotonic() < until:
                done.wait(min(STOP_POLL_S, max(0.0, until - time.monotonic())))
        else:
            rclpy.spin_until_future_complete(
                self.node, future, timeout_sec=max(0.0, until - time.monotonic())
            )

    # --------------------------------------------------------- data plane

    def connect_data_plane(self, grant: SessionGrant, timeout_s: float) -> str | None:
        """Publisher and subscription for the session's topics, matched both ways; or why not.

        Entities already on the grant's topics are kept (a re-opened session
        of the same client reuses them).
        """
        if self._publisher is None or self._publisher.topic_name != grant.observation_topic:
            if self._publisher is not None:
                self.node.destroy_publisher(self._publisher)
            self._publisher = self.node.create_publisher(
                Observation, grant.observation_topic, OBSERVATION_QOS
            )
        if self._subscription is None or self._subscription.topic_name != grant.action_chunk_topic:
            if self._subscription is not None:
                self.node.destroy_subscription(self._subscription)
            self._subscription = self.node.create_subscription(
                ActionChunk, grant.action_chunk_topic, self.on_chunk_message, ACTION_CHUNK_QOS
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            if (
                self._publisher.get_subscription_count() > 0
                and self._subscription.get_publisher_count() > 0
            ):
                self._model = ValidatedModel.of(grant.capabilities)
                return None
            time.sleep(MATCH_POLL_S)
        problem = (
            f"data plane not matched within {timeout_s:g} s ({grant.observation_topic}: "
            f"{self._publisher.get_subscription_count()} subscribers, {grant.action_chunk_topic}: "
            f"{self._subscription.get_publisher_count()} publishers)"
        )
        self._call(
            self._close,
            self._close_request(grant.session_id),
            min(timeout_s, CLOSE_UNUSED_TIMEOUT_S),
        )
        return problem

    def disconnect(self) -> None:
        """Destroy the data plane's publisher and subscription (the services stay)."""
        if self._publisher is not None:
            self.node.destroy_publisher(self._publisher)
            self.node.destroy_subscription(self._subscription)
            self._publisher = self._subscription = None

    def send_observation(self, msg: Observation) -> None:
        """Sign ``msg`` with its session's secret (none for a session this client was not granted)
        and publish it."""
        secret = self.secret_of(msg.session_id)
        if secret:
            integrity.sign(msg, integrity.session_key(secret))
        self._publisher.publish(msg)

    def on_chunk_message(self, msg: ActionChunk) -> None:
        """The chunk subscription's callback: only a chunk signed with its session's secret is
        decoded."""
        received_ns = time.monotonic_ns()
        secret = self.secret_of(msg.session_id)
        forged = (
            integrity.verify(msg, integrity.session_key(secret))
            if secret
            else "chunk names a session this client holds no secret for"
        )
        if forged:
            self._sink.drop_chunk("unauthenticated", forged)
            return
        deliver_chunk(msg, self._sink, received_ns)

    def request_chunk(self, request: RequestId, msg: Observation, timeout_s: float) -> Answer:
        """Send ``msg`` (carrying ``request``) and wait for the chunk answering exactly it.

        Only for a client without a sink: with one, the sink owns the request in flight.
        """
        if self._own_answers is None:
            raise RuntimeError(
                "this client's chunks go to its sink: begin and await requests there"
            )
        if self._model is None:
            # Every answer is checked against the model the session validated.
            raise RuntimeError(
                "no session is open: open_session (and its data plane) before requesting chunks"
            )
        self._own_answers.start(request, self._model)
        self.send_observation(msg)
        deadline = time.monotonic() + timeout_s
        if not self.spinning:
            while not self._own_answers.answered and time.monotonic() < deadline:
                rclpy.spin_once(self.node, timeout_sec=SPIN_POLL_S)
        return self._own_answers.wait(max(0.0, deadline - time.monotonic()))

    def destroy(self) -> None:
        """Destroy every entity this client created on the node."""
        self.disconnect()
        for client in (self._get_status, self._open, self._close, self._reset):
            self.node.destroy_client(client)
