"""A torch-free ``ServedPolicy`` for driving the request path's stages in unit tests.

Its chunk is the observation's state repeated (so a test sees whose
observation a chunk was computed from), and it records which thread ran
which stage for which request, and when. ``gates`` hold a stage until the
test opens them, so the tests order events with gates instead of sleeps.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from lerobot_ros.protocol.contract import CameraSpec, ServerCapabilities
from lerobot_ros.server.policy.policy_seam import InferenceResult, SessionProcessors
from lerobot_ros.sim.so101 import FRONT_CAMERA

GATE_TIMEOUT_S = 10.0


@dataclass
class FakePrepared:
    client: str
    seq: int
    state: np.ndarray


@dataclass
class Event:
    stage: str  # "prepare", "forward", "finish"
    phase: str  # "start" or "end"
    clients: tuple[str, ...]
    seqs: tuple[int, ...]
    thread: str
    at: float = field(default_factory=time.monotonic)


class FakeRunner:
    def __init__(self, chunk_size: int = 4, forward_s: float = 0.0) -> None:
        self.capabilities = ServerCapabilities(
            model_id="fake",
            model_fingerprint="fa4e" * 4,
            policy_type="act",
            action_names=tuple(f"joint_{i}" for i in range(6)),
            state_dim=6,
            cameras=(CameraSpec(FRONT_CAMERA, 96, 128),),
            chunk_size=chunk_size,
        )
        self.batchable, self.exclusive, self.rtc_active = True, False, False
        self.chunk_size, self.forward_s = chunk_size, forward_s
        self.events: list[Event] = []
        self.gates: dict[
            tuple[str, str], threading.Event
        ] = {}  # (stage, client) -> opened by the test
        self.raise_in: dict[tuple[str, str], Exception] = {}  # (stage, client) -> raised there
        self._lock = threading.Lock()

    # ---- test controls ----------------------------------------------------

    def close_gate(self, stage: str, client: str) -> threading.Event:
        gate = self.gates[(stage, client)] = threading.Event()
        return gate

    def wait_for(self, predicate, timeout_s: float = GATE_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"not within {timeout_s} s; events: {self.events}")
            time.sleep(0.005)

    def happened(self, stage: str, phase: str, client: str, seq: int | None = None) -> bool:
        with self._lock:
            return any(
                event.stage == stage
                and event.phase == phase
                and client in event.clients
                and (seq is None or seq in event.seqs)
                for event in self.events
            )

    def forwards(self) -> list[tuple[str, ...]]:
        with self._lock:
            return [
                event.clients
                for event in self.events
                if event.stage == "forward" and event.phase == "start"
            ]

    # ---- ServedPolicy -----------------------------------------------------

    def new_session_processors(self) -> SessionProcessors:
        return SessionProcessors(None, None)

    def reset_session(self, processors: SessionProcessors) -> None:
        pass

    def _stage(self, stage: str, requests: list[FakePrepared]) -> None:
        clients, seqs = tuple(r.client for r in requests), tuple(r.seq for r in requests)
        with self._lock:
            self.events.append(
                Event(stage, "start", clients, seqs, threading.current_thread().name)
            )
        for client in clients:
            gate = self.gates.get((stage, client))
            if gate is not None and not gate.wait(GATE_TIMEOUT_S):
                raise TimeoutError(f"the test never opened the {stage} gate of {client}")
            if (stage, client) in self.raise_in:
                self._end(stage, clients, seqs)
                raise self.raise_in[(stage, client)]
        if stage == "forward" and self.forward_s:
            time.sleep(self.forward_s)
        self._end(stage, clients, seqs)

    def _end(self, stage, clients, seqs) -> None:
        with self._lock:
            self.events.append(Event(stage, "end", clients, seqs, threading.current_thread().name))

    def prepare(self, frame, processors, task, rtc) -> FakePrepared:
        prepared = FakePrepared(
            frame.request.client_id, frame.request.seq, np.array(frame.state, np.float32)
        )
        self._stage("prepare", [prepared])
        return prepared

    def batch_key(self, prepared: FakePrepared) -> tuple:
        return ()

    def infer(self, prepared: list[FakePrepared]):
        started = time.perf_counter()
        self._stage("forward", prepared)
        actions = np.stack([np.tile(request.state, (self.chunk_size, 1)) for request in prepared])
        return actions, time.perf_counter() - started

    def finish(self, prepared: FakePrepared, actions, inference_s: float) -> InferenceResult:
        self._stage("finish", [prepared])
        rows = np.asarray(actions[0], np.float32)
        return InferenceResult(rows, rows.copy(), 0.0, inference_s, 0.0, False, 0)
