"""Warm the served policy up before the server advertises itself as ready.

The first forward passes pay for lazy allocations, cuDNN autotuning and
kernel compilation; a robot must never pay for them inside its control loop.
The warm-up sends synthetic Observation messages through the same request
path a robot's observations take (decode JPEG, validate, preprocess, predict,
postprocess, build the chunk message), with a session of its own that is
discarded afterwards; for an RTC policy, later requests carry a prefix so the
guidance path is warm too.
"""

from __future__ import annotations

import time

import numpy as np

from lerobot_ros import images
from lerobot_ros.contract import ServerCapabilities
from lerobot_ros.data_plane import ChunkReply, RequestId, observation_to_msg
from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.server.request_path import RequestHandler
from lerobot_ros.server.scheduler import Ready
from lerobot_ros.server.sessions import Session, SessionRegistry

WARMUP_CLIENT = "warmup"


def synthetic_observation(
    capabilities: ServerCapabilities, session: Session, seq: int, previous: ChunkReply | None = None
) -> Observation:
    """A neutral observation with every feature the policy reads, JPEG-encoded like a robot's.

    With ``previous`` (an RTC session), it carries that chunk's unexecuted
    rest as the prefix, so the warm-up also runs the RTC guidance path.
    """
    frames = {
        camera.name: images.rgb_to_compressed(np.full((camera.height, camera.width, 3), 128, np.uint8), quality=90)
        for camera in capabilities.cameras
    }
    request = RequestId(session.session_id, session.client_id, seq, session.episode, 0, time.monotonic_ns())
    rtc = {}
    if previous is not None and previous.actions_model is not None:
        delay, horizon = 1, max(1, capabilities.rtc_execution_horizon)
        rtc = {
            "inference_delay_steps": delay,
            "prefix_model": previous.actions_model[delay : delay + horizon],
            "prefix_robot": previous.actions_robot[delay : delay + horizon],
        }
    return observation_to_msg(request, session.task, np.zeros(capabilities.state_dim, np.float32), frames, {}, **rtc)


def warm_up(runner, count: int, task: str = "") -> list[float]:
    """Run ``count`` requests through the full request path; return each one's duration (s)."""
    sessions = SessionRegistry()
    session = Session(WARMUP_CLIENT, task, fps=0.0, rtc_enabled=runner.rtc_active, opened_at=time.monotonic())
    session.processors = runner.new_session_processors()
    sessions.open(session)
    handler = RequestHandler(
        runner, sessions, publish=lambda client, chunk: None, audit=lambda record: None, load=lambda: (0, 0, 0)
    )
    durations = []
    previous = None
    for seq in range(count):
        msg = synthetic_observation(runner.capabilities, session, seq, previous if runner.rtc_active else None)
        started = time.perf_counter()
        outcome = handler.handle(Ready(WARMUP_CLIENT, msg, time.monotonic(), 0))
        durations.append(time.perf_counter() - started)
        if outcome.reply.status != ActionChunk.STATUS_OK:
            raise RuntimeError(f"warm-up request {seq} failed: {outcome.reply.error}")
        previous = outcome.reply
    return durations
