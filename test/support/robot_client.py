"""A scripted robot for server tests: opens a session, sends observations, collects chunks.

It runs in the test process on the shared test node, so every exchange
crosses a real process boundary to the server under test.
"""

from __future__ import annotations

import time

import numpy as np
from support.ros import spin_until

from lerobot_ros import images
from lerobot_ros.data_plane import RequestId, observation_to_msg
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS
from lerobot_ros.sim.default_policy import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.srv import CloseSession, OpenSession, ResetEpisode


def call(node, client, request, timeout_s=20.0):
    assert client.wait_for_service(timeout_sec=timeout_s), f"{client.srv_name} not available"
    future = client.call_async(request)
    assert spin_until(node, future.done, timeout_s), f"{client.srv_name} did not answer"
    return future.result()


class RobotClient:
    def __init__(self, node, client_id: str, namespace: str = "/lerobot"):
        self.node, self.client_id, self.namespace = node, client_id, namespace
        self.session_id = ""
        self.chunks: list[ActionChunk] = []
        self._publisher = self._subscription = None

    def open(self, **overrides) -> OpenSession.Response:
        request = OpenSession.Request(
            client_id=self.client_id,
            schema_version=Observation.CURRENT_SCHEMA_VERSION,
            action_names=list(SO101_JOINT_NAMES),
            state_dim=6,
            camera_names=[FRONT_CAMERA],
            fps=30.0,
        )
        for name, value in overrides.items():
            setattr(request, name, value)
        client = self.node.create_client(OpenSession, f"{self.namespace}/open_session")
        try:
            response = call(self.node, client, request)
        finally:
            self.node.destroy_client(client)
        if response.accepted:
            self.session_id = response.session_id
            self._connect(response.observation_topic, response.action_chunk_topic)
        return response

    def _connect(self, observation_topic: str, action_chunk_topic: str) -> None:
        self._disconnect()
        self._publisher = self.node.create_publisher(Observation, observation_topic, OBSERVATION_QOS)
        self._subscription = self.node.create_subscription(
            ActionChunk, action_chunk_topic, self.chunks.append, ACTION_CHUNK_QOS
        )
        # Volatile topics: wait until the server's ends are matched, or the first message is lost.
        matched = spin_until(
            self.node,
            lambda: self._publisher.get_subscription_count() > 0 and self._subscription.get_publisher_count() > 0,
            10.0,
        )
        assert matched, f"data plane of {self.client_id} not matched"

    def _disconnect(self) -> None:
        if self._publisher is not None:
            self.node.destroy_publisher(self._publisher)
            self.node.destroy_subscription(self._subscription)
            self._publisher = self._subscription = None

    def observation(self, seq: int, state=None, rgb=None, episode: int = 0, **fields) -> Observation:
        state = np.zeros(6, np.float32) if state is None else np.asarray(state, np.float32)
        rgb = np.full((96, 128, 3), 90, np.uint8) if rgb is None else rgb
        request = RequestId(self.session_id, self.client_id, seq, episode, 0, time.monotonic_ns())
        msg = observation_to_msg(request, "", state, {FRONT_CAMERA: images.rgb_to_compressed(rgb, 90)}, {})
        for name, value in fields.items():
            setattr(msg, name, value)
        return msg

    def send(self, msg: Observation) -> None:
        self._publisher.publish(msg)

    def request(self, msg: Observation, timeout_s: float = 20.0) -> ActionChunk:
        """Send one observation and wait for the chunk answering it."""
        self.send(msg)
        answered = lambda: any(chunk.seq == msg.seq for chunk in self.chunks)  # noqa: E731
        assert spin_until(self.node, answered, timeout_s), f"no chunk for seq {msg.seq} of {self.client_id}"
        return next(chunk for chunk in self.chunks if chunk.seq == msg.seq)

    def reset_episode(self, episode: int) -> ResetEpisode.Response:
        client = self.node.create_client(ResetEpisode, f"{self.namespace}/reset_episode")
        try:
            return call(self.node, client, ResetEpisode.Request(client_id=self.client_id, session_id=self.session_id, episode=episode))
        finally:
            self.node.destroy_client(client)

    def close(self) -> CloseSession.Response:
        self._disconnect()
        client = self.node.create_client(CloseSession, f"{self.namespace}/close_session")
        try:
            return call(self.node, client, CloseSession.Request(client_id=self.client_id, session_id=self.session_id))
        finally:
            self.node.destroy_client(client)
