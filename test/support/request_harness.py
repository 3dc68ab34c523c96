"""The server's request path in the test process: a real policy, sessions and handler, no ROS
graph.

Published chunks and audit lines are collected in lists, so a test reads
exactly what a robot and the audit log would have received.
"""

from __future__ import annotations

import time

import numpy as np

from bench.scripted_robot import message_of, plain_request
from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import RequestId, RequestLimits
from lerobot_ros.server.requests.request_path import RequestHandler
from lerobot_ros.server.requests.scheduler import Ready
from lerobot_ros.server.sessions.registry import Session, SessionRegistry
from lerobot_ros.sim.so101 import FRONT_CAMERA


def act_runner(checkpoint):
    """A PolicyRunner on the CPU for ``checkpoint``."""
    from lerobot_ros.server.policy.checkpoint import load_policy
    from lerobot_ros.server.policy.inference import PolicyRunner

    return PolicyRunner(load_policy(str(checkpoint), device="cpu"))


class Harness:
    def __init__(self, runner):
        self.runner = runner
        self.sessions = SessionRegistry()
        self.published: list[tuple[str, ActionChunk]] = []
        self.audit: list[dict] = []
        self.handler = RequestHandler(
            runner,
            self.sessions,
            publish=lambda client, chunk: self.published.append((client, chunk)),
            audit=self.audit.append,
            load=lambda: (self.sessions.count(), 4, 0),
            limits=RequestLimits(max_image_bytes=200_000),
        )
        self.session = self.open("arm")

    def open(self, client, task="", rtc=False):
        session = Session(client, task=task, fps=30.0, rtc_enabled=rtc, opened_at=time.monotonic())
        session.processors = self.runner.new_session_processors()
        self.sessions.open(session)
        return session

    def observation(
        self,
        session=None,
        seq=0,
        state=None,
        frame=None,
        episode=0,
        prefix=None,
        delay=0,
        **fields,
    ):
        """An observation of ``session``; ``prefix`` (model space) goes with its robot-space twin
        (x 0.3 + 1)."""
        session = session or self.session
        rgb = frame if frame is not None else np.full((96, 128, 3), 100, np.uint8)
        request = RequestId(
            session.session_id, session.client_id, seq, episode, 0, time.monotonic_ns()
        )
        state = np.zeros(6, np.float32) if state is None else np.asarray(state, np.float32)
        prefix_robot = None if prefix is None else np.asarray(prefix, np.float32) * 0.3 + 1.0
        # built where the executor builds it (a PendingRequest's outgoing()); ``fields`` then bend
        # it as the test wants
        msg = message_of(
            plain_request(
                request,
                state,
                {FRONT_CAMERA: images.rgb_to_compressed(rgb, 90)},
                inference_delay_steps=delay,
                prefix=None if prefix is None else (prefix, prefix_robot),
            )
        )
        for name, value in fields.items():
            setattr(msg, name, value)
        return msg

    def send(self, msg, key="arm"):
        return self.handler.handle(Ready(key, msg, time.monotonic(), 0))

    def send_batch(self, messages):
        """Hand ``messages`` (each on its own client's topic) to the request path as one batch."""
        return self.handler.handle_batch(
            [Ready(msg.client_id, msg, time.monotonic(), 0) for msg in messages]
        )
