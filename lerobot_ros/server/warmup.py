"""Warm the served policy up before the server advertises itself as ready.

The first forward passes pay for lazy allocations, cuDNN autotuning and
kernel compilation; a robot must never pay for them inside its control loop.
The warm-up sends synthetic Observation messages through the same request
path a robot's observations take (decode JPEG, validate, preprocess, predict,
postprocess, build the chunk message), with a session of its own that is
discarded afterwards; for an RTC policy, later requests carry a prefix so the
guidance path is warm too. A compiled forward (``compile_mode``) compiles once
per input shape: for a policy that batches across sessions, the warm-up also
runs a forward pass of two sessions (with prefixes too, under RTC), after
which torch compiles the batch dimension as dynamic, so no batch size a
robot's request later joins compiles while it waits.
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
    """Run ``count`` requests through the full request path, then, for a compiled forward that batches,
    forward passes of two sessions (see the module docstring); return each forward's duration (s)."""
    sessions = SessionRegistry()
    warm = [open_local_session(sessions, runner, WARMUP_CLIENT, task)]
    handler = RequestHandler(
        runner, sessions, publish=lambda client, chunk: None, audit=lambda record: None, load=lambda: (0, 0, 0)
    )
    durations = []
    previous: list[ChunkReply | None] = [None]
    rounds = [[0]] * count
    if count and runner.compiled and runner.batchable:
        warm.append(open_local_session(sessions, runner, f"{WARMUP_CLIENT}_2", task))
        previous.append(None)
        rounds += [[0, 1]] * (2 if runner.rtc_active else 1)
    for seq, members in enumerate(rounds):
        messages = [
            synthetic_observation(runner.capabilities, warm[i], seq, previous[i] if runner.rtc_active else None)
            for i in members
        ]
        started = time.perf_counter()
        answered = handler.handle_batch([Ready(warm[i].client_id, msg, time.monotonic(), 0) for i, msg in zip(members, messages)])
        durations.append(time.perf_counter() - started)
        for i, outcome in zip(members, answered.outcomes):
            if outcome.reply.status != ActionChunk.STATUS_OK:
                raise RuntimeError(f"warm-up request {seq} of {warm[i].client_id} failed: {outcome.reply.error}")
            previous[i] = outcome.reply
    return durations


def open_local_session(sessions: SessionRegistry, runner, client: str, task: str) -> Session:
    """A session of ``client`` in ``sessions`` with processors of its own, as OpenSession would open it."""
    session = Session(client, task, fps=0.0, rtc_enabled=runner.rtc_active, opened_at=time.monotonic())
    session.processors = runner.new_session_processors()
    sessions.open(session)
    return session
