"""A scripted robot for server tests: the product's session client, plus what tests need to look
at.

It runs in the test process on the shared test node, so every exchange
crosses a real process boundary to the server under test. Unlike the
executor it may send anything (a test builds malformed observations on
purpose) and it keeps every chunk message as it arrived, refusals included.
The observation it starts from is a well-behaved robot's, built on the
executor's request path (``bench/scripted_robot.py``: a ``PendingRequest``'s
``outgoing()``); only the seq and episode are the test's to choose.
"""

from __future__ import annotations

import time

import numpy as np

from bench.scripted_robot import message_of, plain_request
from lerobot_ros.executor.session.session_client import SessionClient, grant_of
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import RequestId
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.srv import CloseSession, OpenSession, ResetEpisode
from support.ros import spin_until

CALL_TIMEOUT_S = 20.0
MATCH_TIMEOUT_S = 10.0


def call(node, client, request, timeout_s=CALL_TIMEOUT_S):
    assert client.wait_for_service(timeout_sec=timeout_s), f"{client.srv_name} not available"
    future = client.call_async(request)
    assert spin_until(node, future.done, timeout_s), f"{client.srv_name} did not answer"
    return future.result()


def _answered(response, what: str):
    assert not isinstance(response, str), f"{what}: {response}"
    return response


class _RecordingClient(SessionClient):
    """The product client, keeping every chunk message as it arrived."""

    def __init__(self, node, namespace: str, client_id: str) -> None:
        super().__init__(node, namespace, client_id)
        self.messages: list[ActionChunk] = []

    def on_chunk_message(self, msg: ActionChunk) -> None:
        self.messages.append(msg)
        super().on_chunk_message(msg)


class RobotClient:
    def __init__(self, node, client_id: str, namespace: str = "/lerobot"):
        self.node, self.client_id, self.namespace = node, client_id, namespace
        self.session_id = ""
        self._session = _RecordingClient(node, namespace, client_id)
        self.chunks: list[ActionChunk] = self._session.messages

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
        response = _answered(
            self._session.request_session(request, CALL_TIMEOUT_S), "open_session"
        )
        if response.accepted:
            self.session_id = response.session_id
            problem = self._session.connect_data_plane(grant_of(response), MATCH_TIMEOUT_S)
            assert problem is None, f"data plane of {self.client_id} not matched: {problem}"
        return response

    def observation(
        self, seq: int, state=None, rgb=None, episode: int = 0, **fields
    ) -> Observation:
        state = np.zeros(6, np.float32) if state is None else np.asarray(state, np.float32)
        rgb = np.full((96, 128, 3), 90, np.uint8) if rgb is None else rgb
        request = RequestId(self.session_id, self.client_id, seq, episode, 0, time.monotonic_ns())
        # A well-behaved robot's message, built where the executor builds it; ``fields`` then
        # bend it as the test wants.
        msg = message_of(
            plain_request(request, state, {FRONT_CAMERA: images.rgb_to_compressed(rgb, 90)})
        )
        for name, value in fields.items():
            setattr(msg, name, value)
        return msg

    def send(self, msg: Observation) -> None:
        self._session.send_observation(msg)

    def request(self, msg: Observation, timeout_s: float = 20.0) -> ActionChunk:
        """Send one observation and wait for the chunk message with its seq (a refusal
        included)."""
        self.send(msg)
        answered = lambda: any(chunk.seq == msg.seq for chunk in self.chunks)  # noqa: E731
        assert spin_until(self.node, answered, timeout_s), (
            f"no chunk for seq {msg.seq} of {self.client_id}"
        )
        return next(chunk for chunk in self.chunks if chunk.seq == msg.seq)

    def reset_episode(self, episode: int) -> ResetEpisode.Response:
        return _answered(
            self._session.reset_episode(self.session_id, episode, CALL_TIMEOUT_S), "reset_episode"
        )

    def close(self) -> CloseSession.Response:
        return _answered(
            self._session.close_session(self.session_id, CALL_TIMEOUT_S), "close_session"
        )

    def _disconnect(self) -> None:
        self._session.disconnect()
