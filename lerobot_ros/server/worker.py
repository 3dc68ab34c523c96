"""The inference worker: the one thread that owns the model.

Invariant: ROS callbacks never run inference; they deposit observations and
return. This thread takes them from the scheduler one at a time and runs the
request path. ``stop`` lets the request in flight finish (and its chunk be
published), then answers the observations still waiting with a refusal
(audited; their robots stop waiting at once) before the thread ends; an
exception in one request is logged and never ends the thread.
"""

from __future__ import annotations

import threading

from lerobot_ros.server.scheduler import Ready, Scheduler

_POLL_S = 0.2
DRAINING = "the server is shutting down: this observation was not run"


class InferenceWorker(threading.Thread):
    def __init__(self, scheduler: Scheduler, handler, stats, logger) -> None:
        super().__init__(name="lerobot_ros-inference", daemon=True)
        self.scheduler = scheduler
        self.handler = handler
        self.stats = stats
        self.logger = logger
        self._stopping = threading.Event()
        self._waiting_at_stop: list[Ready] = []

    def run(self) -> None:
        while not self._stopping.is_set():
            ready = self.scheduler.take(_POLL_S)
            if ready is not None:
                self._answer(ready)
        for ready in self._waiting_at_stop:
            self._answer(ready, refusal=DRAINING)

    def _answer(self, ready: Ready, refusal: str | None = None) -> None:
        try:
            outcome = self.handler.handle(ready, refusal=refusal)
        except Exception as error:  # noqa: BLE001 - the worker must outlive any one request
            self.logger.error(f"request from {ready.key!r} could not be answered: {type(error).__name__}: {error}")
            return
        self.stats.record(outcome.outcome, outcome.reply.inference_s, outcome.reply.superseded)
        if outcome.outcome in ("rejected", "failed"):
            self.logger.warning(
                f"{outcome.outcome} observation seq {outcome.reply.request.seq} from {ready.key}: {outcome.reply.error}"
            )

    def stop(self) -> None:
        """Finish the request in flight, refuse the waiting ones, take no more."""
        self._waiting_at_stop = self.scheduler.close()
        self._stopping.set()
