"""Robots that ask at a real robot's rate: the executor's trigger and replace-mode queue, many in
one process.

A closed-loop client (bench/batching.py) measures what a server can push
out; a deployment's question is how many real robots it holds, and a real
robot does not ask as fast as it can. It asks when its queued playback time
falls to the executor's threshold (``executor/trigger.py``
``request_threshold_s``, fed with the robot's own windowed p95 round trip,
``executor/latency.py``), and in replace mode (RTC) the merged chunk replaces
its queue minus the rows executed during the round trip (``ActionQueue``'s
replace, clamped to the rows actually consumed). So its request rate follows
its latency:

    r(p95) = fps / max(L - floor(fps * theta(p95)), fps * d)
    theta(p95) = max(buffer_time_s, min(margin * p95 + 1/fps, L/fps))

(L the chunk length, d the round trip): per cycle the robot plays the
chunk's rows down to the threshold, the rows it plays while the next answer
travels come out of the old chunk, and it cannot ask again before that answer
arrives. ``ReplaceModeQueue`` keeps this as time arithmetic, with no control
loop to tick; ``request_rate`` is the formula.

Many robots on 2 cores cannot each be an executor process, so ``Fleet`` runs
them as threads of ONE process, each a scripted robot on the executor's own
request path (bench/scripted_robot.py: the product's session client, OpenSession
with its data plane matched, every observation a ``PendingRequest`` signed,
every chunk matched to its request), sending the
same pre-encoded JPEG frames each time so the clients stay cheap. Each robot
starts streaming at a random phase within one chunk's duration, as
independent robots would, not in lock step.

Deliberate differences from the executor: the request timeout is long (a
saturated server shows as latency, not as re-requests), and no RTC prefix is
sent (the policies served here without RTC ignore it; the queue still merges
in replace mode, as an RTC robot's does).
"""

from __future__ import annotations

import math
import threading
import time

import numpy as np

from bench.scripted_robot import ScriptedRobot
from lerobot_ros.executor.requests.latency import WindowedLatencyTracker, control_steps
from lerobot_ros.protocol.trigger import request_threshold_s
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.data_plane import camera_payloads

FPS = 30.0
CHUNK = 50
BUFFER_S = 0.5  # the executor's default buffer_time_s
MARGIN = 1.5  # its default request_latency_margin
LATENCY_WINDOW = 50  # its latency window (requests)
REQUEST_TIMEOUT_S = 10.0
TASK = "pick up the cube"


def threshold_rows(p95_s: float, fps: float = FPS, chunk: int = CHUNK) -> int:
    """Queued rows at which the next request leaves (the queue drains in whole rows)."""
    theta = request_threshold_s(BUFFER_S, p95_s, MARGIN, fps, chunk, replace_mode=True)
    return math.floor(theta * fps + 1e-9)


def request_rate(
    p95_s: float, round_trip_s: float = 0.0, fps: float = FPS, chunk: int = CHUNK
) -> float:
    """Requests per second of one robot whose p95 round trip is ``p95_s`` (module docstring)."""
    return fps / max(chunk - threshold_rows(p95_s, fps, chunk), fps * round_trip_s, 1e-9)


class ReplaceModeQueue:
    """One robot's queue and trigger in replace mode, as times: when the next request is due, what
    a merge leaves."""

    def __init__(self, fps: float = FPS, chunk: int = CHUNK) -> None:
        self.fps, self.chunk = fps, chunk
        self.latency = WindowedLatencyTracker(LATENCY_WINDOW)
        self.threshold = threshold_rows(0.0, fps, chunk)
        self.rows, self.merged_at = 0, 0.0  # rows queued at the latest merge, and when

    def start(self, now_s: float) -> None:
        """A robot starting up: an empty queue, a request due at once."""
        self.rows, self.merged_at = 0, now_s

    def rows_left(self, now_s: float) -> int:
        return max(0, self.rows - int((now_s - self.merged_at) * self.fps + 1e-9))

    def due_at(self) -> float:
        return self.merged_at + max(0, self.rows - self.threshold) / self.fps

    def delay_steps(self) -> int:
        """The RTC delay the robot declares with a request: ceil(p95 * fps)."""
        return self.latency.delay_steps(self.fps)

    def merge(self, sent_s: float, received_s: float) -> tuple[int, int]:
        """A chunk sent at ``sent_s`` merged at ``received_s``: (rows trimmed, control steps the
        queue was empty)."""
        latency = max(0.0, received_s - sent_s)
        steps_since_merge = int((received_s - self.merged_at) * self.fps + 1e-9)
        starved = max(0, steps_since_merge - self.rows)
        consumed = min(self.rows_left(sent_s), int(latency * self.fps + 1e-9))
        self.latency.add(latency)
        self.threshold = threshold_rows(self.latency.p95, self.fps, self.chunk)
        trimmed = min(control_steps(latency, self.fps), consumed, self.chunk)
        self.rows, self.merged_at = self.chunk - trimmed, received_s
        return trimmed, starved


def encoded_cameras(
    names, frame_shape=(480, 640), policy_size=(224, 224), quality: int = 90, seed: int = 0
) -> dict:
    """One JPEG per camera as the executor sends it by default: a ``frame_shape`` frame shrunk to
    the policy's
    size and encoded (``camera_payloads``, jpeg_quality 90). Smooth content with a little noise, so
    the JPEG
    is about the size a real scene gives, not the size of white noise."""
    rng = np.random.default_rng(seed)
    height, width = frame_shape
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    frames = {}
    for index, name in enumerate(names):
        phase = rng.uniform(0, 2 * np.pi, 3)
        channels = [
            127 + 90 * np.sin(x / (37 + 11 * index + 5 * c) + y / (53 + 7 * c) + phase[c])
            for c in range(3)
        ]
        rgb = np.stack(channels, axis=-1) + rng.normal(0, 6, (height, width, 3))
        frames[name] = images.rgb_to_raw(np.clip(rgb, 0, 255).astype(np.uint8))
    compressed, _ = camera_payloads(frames, quality, {name: policy_size for name in names})
    return compressed


class PacedRobot(threading.Thread):
    """One robot of the fleet: a ``ScriptedRobot`` with its own session, one request in flight,
    asking when its trigger says."""

    def __init__(
        self, node, namespace: str, client_id: str, index: int, cameras: dict, action_names
    ) -> None:
        super().__init__(name=client_id, daemon=True)
        self.client_id, self.cameras = client_id, cameras
        self.rng = np.random.default_rng(index)
        self.robot = ScriptedRobot(
            node,
            namespace,
            client_id,
            state=self.rng.uniform(-0.5, 0.5, len(action_names)).astype(np.float32),
            cameras=cameras,  # encoded once at the policy's size, forwarded untouched
            action_names=action_names,
            fps=FPS,
            task=TASK,
            rtc=False,
            # the replace-mode queue is kept as times (ReplaceModeQueue): no rows to merge
            queue=False,
            resize_to_policy=False,
            spinning=True,  # the fleet's spinner thread spins the node
            request_timeout_s=REQUEST_TIMEOUT_S,
        )
        self.robot.open(attempts=3)
        self.halt, self.go, self.idle, self.stopped = (
            threading.Event(),
            threading.Event(),
            threading.Event(),
            False,
        )
        self.idle.set()
        self.phase_s = 0.0
        # (received monotonic ns, round trip s, batch size, steps the queue was empty before this
        # merge)
        self.answers: list[tuple[int, float, int, int]] = []
        self.failures: list[tuple[int, str]] = self.robot.failures

    @property
    def session_id(self) -> str:
        return self.robot.session_id

    @property
    def seq(self) -> int:
        return self.robot.requests.seq

    def run(self) -> None:
        while not self.stopped:
            if not self.go.wait(0.1):
                continue
            self.idle.clear()
            self.go.clear()
            try:
                self._stream()
            finally:
                self.idle.set()

    def _stream(self) -> None:
        queue = ReplaceModeQueue()
        if self.halt.wait(self.phase_s):
            return
        queue.start(time.monotonic())

        def merged(exchange) -> None:
            _, starved = queue.merge(exchange.sent_ns / 1e9, exchange.received_ns / 1e9)
            self.answers.append(
                (exchange.received_ns, exchange.round_trip_s, exchange.chunk.batch_size, starved)
            )

        # an unanswered request leaves the robot still due: the next observation leaves at once
        self.robot.send_loop(self.halt, due=queue.due_at, on_exchange=merged)

    def resume(self, phase_s: float) -> None:
        self.phase_s = phase_s
        self.halt.clear()
        self.go.set()

    def pause(self) -> None:
        self.halt.set()


class Fleet:
    """The robots of one server, opened as needed; ``stream(n)`` runs the first n, ``pause`` holds
    them all."""

    def __init__(
        self, node, spinner, namespace: str, tag: str, cameras: dict, action_names, seed: int = 0
    ) -> None:
        self.node, self.spinner, self.namespace, self.tag = node, spinner, namespace, tag
        self.cameras, self.action_names = cameras, tuple(action_names)
        self.robots: list[PacedRobot] = []
        self.rng = np.random.default_rng(seed)

    def grow(self, count: int) -> None:
        while len(self.robots) < count:
            robot = PacedRobot(
                self.node,
                self.namespace,
                f"{self.tag}_{len(self.robots)}",
                len(self.robots),
                self.cameras,
                self.action_names,
            )
            robot.start()
            self.robots.append(robot)

    def stream(self, count: int) -> list[PacedRobot]:
        self.grow(count)
        active = self.robots[:count]
        for robot in active:
            robot.resume(float(self.rng.uniform(0.0, CHUNK / FPS)))
        return active

    def pause(self, timeout_s: float = REQUEST_TIMEOUT_S + 5.0) -> None:
        """Hold every robot and wait (bounded) until none has a request in flight."""
        for robot in self.robots:
            robot.pause()
        deadline = time.monotonic() + timeout_s
        for robot in self.robots:
            robot.idle.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        self.pause()
        for robot in self.robots:
            robot.stopped = True
            robot.join(timeout=5)
            # rclpy refuses entities destroyed while another thread waits on them
            robot.robot.close(timeout_s=5.0, paused=self.spinner.paused)
