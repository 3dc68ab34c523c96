"""The executor's ROS end of the conversation with one policy server.

Implements ``worker.ServerLink`` with the server's services and the session's
data plane topics. Service calls are ``call_async`` plus a bounded wait: before
the node spins (the first handshake, in the constructor) the wait spins the
node itself; afterwards the executor thread completes the future and the
calling thread (the network worker) only waits.
"""

from __future__ import annotations

import threading
import time

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from lerobot_ros import wire
from lerobot_ros.contract import OpenRequest
from lerobot_ros.data_plane import DataPlaneError, chunk_from_msg
from lerobot_ros.executor.core import ExecutorCore, PreparedRequest, SessionGrant
from lerobot_ros.executor.observation import to_message
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.executor.worker import ServerView
from lerobot_ros.images import ImageError
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS
from lerobot_ros.srv import CloseSession, GetStatus, OpenSession, ResetEpisode

MATCH_POLL_S = 0.01
STOP_POLL_S = 0.1
CLOSE_UNUSED_TIMEOUT_S = 2.0

#: How often an unanswered idempotent service request is sent again (seconds).
RESEND_S = 0.5


class RosServerLink:
    def __init__(self, node: Node, settings: ExecutorSettings, core: ExecutorCore | None = None) -> None:
        self.node, self.settings, self.core = node, settings, core
        # Their own callback group: a response must be handled even while a
        # service callback of the node (awaiting one of these calls) is running.
        group = MutuallyExclusiveCallbackGroup()
        self.get_status_client = node.create_client(GetStatus, settings.service("get_status"), callback_group=group)
        self.open_session_client = node.create_client(OpenSession, settings.service("open_session"), callback_group=group)
        self.close_session_client = node.create_client(
            CloseSession, settings.service("close_session"), callback_group=group
        )
        self.reset_episode_client = node.create_client(
            ResetEpisode, settings.service("reset_episode"), callback_group=group
        )
        self.observation_pub = None
        self.chunk_sub = None
        self.spinning = False  # set once the node's executor spins it
        # Set on shutdown: every wait below ends early, so a drain never waits out a handshake.
        self.stopping = threading.Event()

    # ----------------------------------------------------------- services

    def call(self, client, request, timeout_s: float, idempotent: bool = False):
        """The response, or the reason there is none (text).

        An idempotent request is re-sent every RESEND_S until answered or the
        deadline passes: a request sent just as the service was discovered can
        be lost before the reply path is matched. OpenSession is never re-sent
        (a second one would replace the session the first one opened).
        """
        deadline = time.monotonic() + timeout_s
        if not client.wait_for_service(timeout_sec=timeout_s):
            return f"no policy server answered on {client.srv_name} within {timeout_s:g} s"
        while True:
            attempt_end = min(deadline, time.monotonic() + RESEND_S) if idempotent else deadline
            future = client.call_async(request)
            if self.spinning:
                done = threading.Event()
                future.add_done_callback(lambda _: done.set())
                while not done.is_set() and not self.stopping.is_set() and time.monotonic() < attempt_end:
                    done.wait(min(STOP_POLL_S, max(0.0, attempt_end - time.monotonic())))
            else:
                rclpy.spin_until_future_complete(self.node, future, timeout_sec=max(0.0, attempt_end - time.monotonic()))
            if future.done() and future.result() is not None:
                return future.result()
            future.cancel()
            client.remove_pending_request(future)
            if self.stopping.is_set():
                return f"{client.srv_name}: shutting down"
            if time.monotonic() >= deadline:
                return f"{client.srv_name} did not reply within {timeout_s:g} s"

    def get_status(self, timeout_s: float) -> ServerView | str:
        response = self.call(self.get_status_client, GetStatus.Request(), timeout_s, idempotent=True)
        if isinstance(response, str):
            return response
        status = response.status
        return ServerView(status.ready, status.instance_id, wire.capabilities_from_msg(status.capabilities))

    def open_session(self, timeout_s: float) -> SessionGrant | str:
        settings = self.settings
        request = wire.open_request_to_msg(
            OpenRequest(
                client_id=settings.client_id,
                schema_version=Observation.CURRENT_SCHEMA_VERSION,
                action_names=settings.joint_names,
                state_dim=settings.state_dim,
                camera_names=settings.camera_names,
                fps=settings.fps,
                task=settings.task,
                rtc_requested=settings.rtc_requested,
            )
        )
        response = self.call(self.open_session_client, request, timeout_s)
        if isinstance(response, str):
            return response
        if not response.accepted:
            return f"session refused: {response.message}"
        for warning in response.warnings:
            self.node.get_logger().warning(f"server: {warning}")
        return SessionGrant(
            session_id=response.session_id,
            rtc_enabled=response.rtc_enabled,
            observation_topic=response.observation_topic,
            action_chunk_topic=response.action_chunk_topic,
            capabilities=wire.capabilities_from_msg(response.capabilities),
            warnings=tuple(response.warnings),
        )

    def close_session_request(self) -> CloseSession.Request:
        return CloseSession.Request(client_id=self.settings.client_id, session_id=self.core.session_id)

    def reset_episode_request(self, session_id: str, episode: int) -> ResetEpisode.Request:
        return ResetEpisode.Request(client_id=self.settings.client_id, session_id=session_id, episode=episode)

    # --------------------------------------------------------- data plane

    def connect_data_plane(self, grant: SessionGrant, timeout_s: float) -> str | None:
        """Publisher and subscription for the session's topics, matched before the first request.

        The topics are volatile: an observation published before the server's
        subscription is matched is lost and costs a whole request timeout.
        """
        if self.observation_pub is None or self.observation_pub.topic_name != grant.observation_topic:
            if self.observation_pub is not None:
                self.node.destroy_publisher(self.observation_pub)
            self.observation_pub = self.node.create_publisher(Observation, grant.observation_topic, OBSERVATION_QOS)
        if self.chunk_sub is None or self.chunk_sub.topic_name != grant.action_chunk_topic:
            if self.chunk_sub is not None:
                self.node.destroy_subscription(self.chunk_sub)
            self.chunk_sub = self.node.create_subscription(
                ActionChunk, grant.action_chunk_topic, self.on_chunk, ACTION_CHUNK_QOS
            )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not self.stopping.is_set():
            if self.observation_pub.get_subscription_count() > 0 and self.chunk_sub.get_publisher_count() > 0:
                return None
            time.sleep(MATCH_POLL_S)
        problem = (
            f"data plane not matched within {timeout_s:g} s ({grant.observation_topic}: "
            f"{self.observation_pub.get_subscription_count()} subscribers, {grant.action_chunk_topic}: "
            f"{self.chunk_sub.get_publisher_count()} publishers)"
        )
        # The server opened a session this executor cannot use: close it rather
        # than let it hold a slot until the server's idle timeout.
        self.call(
            self.close_session_client,
            CloseSession.Request(client_id=self.settings.client_id, session_id=grant.session_id),
            min(timeout_s, CLOSE_UNUSED_TIMEOUT_S),
        )
        return problem

    def on_chunk(self, msg: ActionChunk) -> None:
        received_ns = time.monotonic_ns()
        try:
            chunk = chunk_from_msg(msg)
        except DataPlaneError as error:
            self.core.in_flight.drop("malformed", str(error))
            return
        self.core.offer_chunk(chunk, received_ns)

    def send_observation(self, prepared: PreparedRequest) -> str | None:
        snapshot = prepared.snapshot
        try:
            msg = to_message(
                prepared.request,
                self.settings.task,
                prepared.observation,
                self.settings.jpeg_quality,
                prepared.inference_delay_steps,
                snapshot.left_over_model if prepared.rtc else None,
                snapshot.left_over_robot if prepared.rtc else None,
            )
        except ImageError as error:
            return f"camera frame unusable: {error}"
        self.observation_pub.publish(msg)
        return None
