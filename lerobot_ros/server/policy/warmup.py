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
from collections.abc import Iterator

import numpy as np

from lerobot_ros.msg import ActionChunk, Observation
from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import (
    ChunkReply,
    OutgoingObservation,
    RequestId,
    observation_to_msg,
)
from lerobot_ros.server.requests.request_path import RequestHandler
from lerobot_ros.server.requests.scheduler import Ready
from lerobot_ros.server.sessions.registry import Session, SessionRegistry

WARMUP_CLIENT = "warmup"


def synthetic_observation(
    capabilities: ServerCapabilities,
    session: Session,
    seq: int,
    previous: ChunkReply | None = None,
) -> Observation:
    """A neutral observation with every feature the policy reads, JPEG-encoded like a robot's.

    With ``previous`` (an RTC session), it carries that chunk's unexecuted
    rest as the prefix, so the warm-up also runs the RTC guidance path.
    """
    frames = {
        camera.name: images.rgb_to_compressed(
            np.full((camera.height, camera.width, 3), 128, np.uint8), quality=90
        )
        for camera in capabilities.cameras
    }
    request = RequestId(
        session.session_id, session.client_id, seq, session.episode, 0, time.monotonic_ns()
    )
    rtc = {}
    if previous is not None and previous.actions_model is not None:
        delay, horizon = 1, max(1, capabilities.rtc_execution_horizon)
        rtc = {
            "inference_delay_steps": delay,
            "prefix_model": previous.actions_model[delay : delay + horizon],
            "prefix_robot": previous.actions_robot[delay : delay + horizon],
        }
    return observation_to_msg(
        OutgoingObservation(
            request, session.task, np.zeros(capabilities.state_dim, np.float32), frames, {}, **rtc
        )
    )


def warm_up(runner, count: int, task: str = "", on_forward=None) -> list[float]:
    """Run ``count`` requests through the full request path, then, for a compiled forward that
    batches, forward passes of two sessions (see the module docstring); return each round's
    duration (s). ``on_forward(batch_size, seconds)`` hears each forward (the capacity model's
    first samples)."""
    batched = (
        (2 if runner.rtc_active else 1) if count and runner.compiled and runner.batchable else 0
    )
    durations = []
    for seconds, outcomes in synthetic_rounds(runner, count, task, batched):
        durations.append(seconds)
        if on_forward is not None:
            on_forward(outcomes[0].reply.batch_size, outcomes[0].reply.inference_s)
    return durations


def synthetic_rounds(
    runner, count: int, task: str = "", batched: int = 0
) -> Iterator[tuple[float, list]]:
    """``count`` synthetic requests of one session, then ``batched`` forward passes of that session
    and a second one, through the full request path; per round, its duration (s) and outcomes.
    Under RTC each request carries its session's previous chunk as the prefix. Raises RuntimeError
    at the first request not answered OK."""
    sessions = SessionRegistry()
    handler = RequestHandler(
        runner,
        sessions,
        publish=lambda client, chunk: None,
        audit=lambda record: None,
        load=lambda: (0, 0, 0),
    )
    clients = [WARMUP_CLIENT, f"{WARMUP_CLIENT}_2"][: 2 if batched else 1]
    warm = [_open_session(sessions, runner, client, task) for client in clients]
    previous: list[ChunkReply | None] = [None] * len(warm)
    for seq, members in enumerate([[0]] * count + [[0, 1]] * batched):
        ready = [
            Ready(
                warm[i].client_id,
                synthetic_observation(
                    runner.capabilities, warm[i], seq, previous[i] if runner.rtc_active else None
                ),
                time.monotonic(),
                0,
            )
            for i in members
        ]
        started = time.perf_counter()
        outcomes = handler.handle_batch(ready).outcomes
        seconds = time.perf_counter() - started
        for i, outcome in zip(members, outcomes, strict=False):
            if outcome.reply.status != ActionChunk.STATUS_OK:
                raise RuntimeError(
                    f"synthetic request {seq} of {warm[i].client_id} failed: {outcome.reply.error}"
                )
            previous[i] = outcome.reply
        yield seconds, outcomes


def _open_session(sessions: SessionRegistry, runner, client: str, task: str) -> Session:
    session = Session(
        client, task, fps=0.0, rtc_enabled=runner.rtc_active, opened_at=time.monotonic()
    )
    session.processors = runner.new_session_processors()
    sessions.open(session)
    return session
