"""The seam between the request path and a served policy: what a runner offers and which thread
calls what.

The request path (request_path.py) and both workers (worker.py, pipeline.py)
depend on ``ServedPolicy`` only, never on torch: ``inference.PolicyRunner``
is the product's implementation, and the unit tests drive the stages with a
torch-free fake (test/support/fake_runner.py). The benchmarks' modeled
accelerator replaces one method, ``infer`` (startup.override_forward).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.protocol.wire.data_plane import ObservationFrame


@dataclass
class SessionProcessors:
    """One session's own pre- and postprocessor instances (LeRobot pipelines cache state between
    the two)."""

    preprocessor: object
    postprocessor: object


@dataclass
class InferenceResult:
    actions_model: np.ndarray  # [chunk_length, action_dim], before postprocessing
    actions_robot: np.ndarray  # after postprocessing, robot units
    preprocess_s: float
    inference_s: float
    postprocess_s: float
    rtc_applied: bool
    inference_delay_steps: int


class ServedPolicy(Protocol):
    """A loaded policy as the request path drives it.

    Threads: ``new_session_processors`` runs on the node's thread (an
    OpenSession callback); ``reset_session`` and ``prepare`` run on an
    admission thread (the serial worker's one thread without the pipeline),
    never on two threads at once for one session (one request in flight per
    session); ``batch_key`` and ``infer`` run on the forward thread only, the
    one thread that owns the model; ``finish`` runs on the finish thread.
    ``prepare`` draws a request's noise from its own generator, never from
    a global one, so requests prepared side by side never draw under each
    other's seed; ``infer`` returns the actions on the host, so a finish
    never waits behind the next forward on the device.
    """

    capabilities: ServerCapabilities
    batchable: bool  # several sessions' requests may share one forward pass
    exclusive: bool  # one session owns the model (observation history)
    rtc_active: bool

    def new_session_processors(self) -> SessionProcessors: ...

    def reset_session(self, processors: SessionProcessors) -> None: ...

    def prepare(
        self, frame: ObservationFrame, processors: SessionProcessors, task: str, rtc: bool
    ) -> Any: ...

    def batch_key(self, prepared: Any) -> tuple: ...

    def infer(self, prepared: list[Any]) -> tuple[Any, float]: ...

    def finish(self, prepared: Any, actions: Any, inference_s: float) -> InferenceResult: ...
