"""The inference worker: the one thread that owns the model.

Invariant: ROS callbacks never run inference; they deposit observations and
return. This thread takes them from the scheduler (a batch of distinct
sessions at a time) and runs the request path. ``stop`` lets the request in flight finish (and its chunk be
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
            batch = self.scheduler.take_batch(_POLL_S)
            if batch:
                self._answer(batch)
        if self._waiting_at_stop:
            self._answer(self._waiting_at_stop, refusal=DRAINING)

    def _answer(self, batch: list[Ready], refusal: str | None = None) -> None:
        try:
            answered = self.handler.handle_batch(batch, refusal=refusal)
        except Exception as error:  # noqa: BLE001 - the worker must outlive any one request
            clients = [ready.key for ready in batch]
            self.logger.error(f"requests from {clients!r} could not be answered: {type(error).__name__}: {error}")
            return
        for size in answered.forwards:
            self.stats.record_forward(size)
        for ready, outcome in zip(batch, answered.outcomes):
            reply = outcome.reply
            self.stats.record(outcome.outcome, reply.inference_s, reply.superseded, reply.batch_size)
            if outcome.outcome in ("rejected", "failed"):
                self.logger.warning(f"{outcome.outcome} observation seq {reply.request.seq} from {ready.key}: {reply.error}")

    def stop(self) -> None:
        """Finish the request in flight, refuse the waiting ones, take no more."""
        self._waiting_at_stop = self.scheduler.close()
        self._stopping.set()
