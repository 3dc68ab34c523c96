"""The serial inference worker: one thread runs every stage of a batch in turn (``pipeline:
false``).

Invariant: ROS callbacks never run inference; they deposit observations and
return. This thread takes them from the scheduler (a batch of distinct
sessions at a time) and runs the request path. ``stop`` lets the request in
flight finish (and its chunk be published), then answers the observations
still waiting with a refusal (audited; their robots stop waiting at once)
before the thread ends; an exception in one request is logged and never ends
the thread. The pipelined worker (pipeline.py) is the default; this one is
what it is measured against.
"""

from __future__ import annotations

import threading

from lerobot_ros.server.requests.request_path import Outcome
from lerobot_ros.server.requests.scheduler import Ready, Scheduler

POLL_S = 0.2
DRAINING = "the server is shutting down: this observation was not run"


def report_outcome(stats, logger, key, outcome: Outcome) -> None:
    """Count one answered request; warn about a refused or failed one. A superseded one is counted
    with the next request of its session (the mailbox carries the count), not here."""
    reply = outcome.reply
    if outcome.outcome == "superseded":
        return
    stats.record(outcome.outcome, reply.inference_s, reply.superseded, reply.batch_size)
    if outcome.outcome in ("rejected", "failed"):
        logger.warning(
            f"{outcome.outcome} observation seq {reply.request.seq} from {key}: {reply.error}"
        )


class InferenceWorker(threading.Thread):
    def __init__(self, scheduler: Scheduler, handler, stats, logger) -> None:
        super().__init__(name="lerobot_ros-inference", daemon=True)
        self.scheduler = scheduler
        self.handler = handler
        self.stats = stats
        self.logger = logger
        self._stopping = threading.Event()
        self._waiting_at_stop: list[Ready] = []

    shape = "serial: one thread runs every stage"

    def run(self) -> None:
        while not self._stopping.is_set():
            batch = self.scheduler.take_batch(POLL_S)
            if batch:
                self._answer(batch)
        if self._waiting_at_stop:
            self._answer(self._waiting_at_stop, refusal=DRAINING)

    def _answer(self, batch: list[Ready], refusal: str | None = None) -> None:
        try:
            answered = self.handler.handle_batch(batch, refusal=refusal)
        except Exception as error:  # noqa: BLE001 - the worker must outlive any one request
            clients = [ready.key for ready in batch]
            self.logger.error(
                f"requests from {clients!r} could not be answered: {type(error).__name__}: {error}"
            )
            return
        for size in answered.forwards:
            self.stats.record_forward(size)
        for ready, outcome in zip(batch, answered.outcomes, strict=False):
            report_outcome(self.stats, self.logger, ready.key, outcome)

    def stop(self) -> None:
        """Finish the request in flight, refuse the waiting ones, take no more."""
        self._waiting_at_stop = self.scheduler.close()
        self._stopping.set()
