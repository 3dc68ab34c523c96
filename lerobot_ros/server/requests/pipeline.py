"""The pipelined worker: admission, forward and finish on their own threads, so the forward thread
only runs forwards.

```
 scheduler ─► admission pool ─► prepared ─► forward thread ─► finished ─► finish thread ─► chunk
 (newest wins, decode, validate, queue      every prepared     queue      postprocess,    topics
  round robin) preprocess                   request, batched              check, sign,
                                                                          publish, audit,
                                                                          release
```

Invariants (each pinned by test/unit/server/test_pipeline.py):

* one request in flight per session: the admission pool ``hold``s a
  session's observation and the finish thread ``release``s it once it is
  answered, so one session's processors never run on two threads at once
  and a session appears at most once in any stage;
* newest observation wins across stages: a prepared request whose session
  has a newer observation waiting when the forward thread takes it is never
  forwarded; it is audited as ``superseded`` and counted with the next chunk;
* continuous batching: when a forward returns, the forward thread takes every
  prepared request (up to ``max_batch_size``); ``batch_window_s`` > 0 waits
  up to that long for requests still being admitted, never for ones not taken;
* the hand-offs are bounded by the sessions: with one request in flight per
  session no queue ever holds more requests than there are sessions;
* an exception answers only its own requests: admission and finish fail the
  one request, a shared forward that raises is rerun one request at a time;
* ``stop`` refuses what waits in the mailboxes at once and lets every stage
  deliver what it holds; the threads end in stage order.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable

from lerobot_ros.server.requests.request_path import Forward, RequestHandler, ServedRequest
from lerobot_ros.server.requests.scheduler import Ready, Scheduler
from lerobot_ros.server.requests.serial_worker import (
    DRAINING,
    POLL_S,
    InferenceWorker,
    report_outcome,
)

_STOP_POLL_S = 0.02


def admission_workers(configured: int) -> int:
    """The admission pool's size: ``configured``, or for 0 one per usable core beside the forward
    thread's (1..4).

    More threads than that only queue for the GIL, which LeRobot's processors hold most of the
    time.
    """
    if configured > 0:
        return configured
    return max(1, min(4, len(os.sched_getaffinity(0)) - 1))


def build_worker(
    pipelined: bool,
    configured_workers: int,
    scheduler: Scheduler,
    handler: RequestHandler,
    stats,
    logger,
    curve=None,
):
    """The pipelined worker feeding ``curve`` (capacity.ServiceCurve) with forward and host times,
    or the serial one."""
    if not pipelined:
        return InferenceWorker(scheduler, handler, stats, logger)
    return PipelinedWorker(
        scheduler,
        handler,
        stats,
        logger,
        admission_workers(configured_workers),
        curve.record_forward if curve is not None else None,
        curve.record_host if curve is not None else None,
    )


class PreparedQueue:
    """Prepared requests waiting for the forward thread; ``take_all`` is the continuous batcher."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._requests: list[ServedRequest] = []
        self._admitting = 0  # requests the admission pool is preparing now

    def admitting(self, delta: int) -> None:
        with self._condition:
            self._admitting += delta
            self._condition.notify_all()

    def put(self, request: ServedRequest) -> None:
        with self._condition:
            self._requests.append(request)
            self._condition.notify_all()

    def take_all(self, max_size: int, window_s: float, timeout_s: float) -> list[ServedRequest]:
        """Every prepared request (up to ``max_size``, oldest first), waiting up to ``timeout_s``
        for the first
        and then up to ``window_s`` for requests being admitted to join; empty after
        ``timeout_s``."""
        with self._condition:
            if not self._condition.wait_for(lambda: self._requests, timeout_s):
                return []
            window_end = time.monotonic() + window_s
            while (
                len(self._requests) < max_size
                and self._admitting > 0
                and (remaining := window_end - time.monotonic()) > 0
            ):
                self._condition.wait(remaining)
            taken, self._requests = self._requests[:max_size], self._requests[max_size:]
            return taken

    def __len__(self) -> int:
        with self._condition:
            return len(self._requests)


class PipelinedWorker:
    """Runs ``RequestHandler``'s stages on ``admission_workers`` + 2 threads; same interface as
    InferenceWorker."""

    def __init__(
        self,
        scheduler: Scheduler,
        handler: RequestHandler,
        stats,
        logger,
        admission_workers: int = 1,
        observe_forward: Callable[[int, float], None] | None = None,
        observe_host: Callable[[float], None] | None = None,
    ) -> None:
        if admission_workers < 1:
            raise ValueError(f"admission_workers must be >= 1, got {admission_workers}")
        self.scheduler, self.handler, self.stats, self.logger = scheduler, handler, stats, logger
        self._observe_forward = observe_forward or (lambda size, seconds: None)
        self._observe_host = observe_host or (lambda seconds: None)
        self.prepared = PreparedQueue()
        self.finished: queue.SimpleQueue[Forward | ServedRequest] = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._admission = [
            threading.Thread(
                target=self._admission_loop, name=f"lerobot_ros-admission-{i}", daemon=True
            )
            for i in range(admission_workers)
        ]
        self._forward = threading.Thread(
            target=self._forward_loop, name="lerobot_ros-inference", daemon=True
        )
        self._finish = threading.Thread(
            target=self._finish_loop, name="lerobot_ros-finish", daemon=True
        )

    @property
    def shape(self) -> str:
        return f"pipelined: {len(self._admission)} admission threads, forward, finish"

    @property
    def threads(self) -> list[threading.Thread]:
        return [*self._admission, self._forward, self._finish]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def is_alive(self) -> bool:
        return any(thread.is_alive() for thread in self.threads)

    def join(self, timeout: float | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self.threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        """Refuse the observations waiting in mailboxes; every stage delivers what it holds, then
        its thread ends."""
        # Refusals are queued before the stages learn of the stop, so the finish thread cannot end
        # before them.
        for ready in self.scheduler.close():
            self.finished.put(self.handler.admit(ready, refusal=DRAINING))
        self._stopping.set()

    # ---- stage 1 ---------------------------------------------------------

    def _admission_loop(self) -> None:
        while True:
            ready = self.scheduler.hold(POLL_S)
            if ready is None:
                if self._stopping.is_set():
                    return
                continue
            self.prepared.admitting(+1)
            try:
                self._admit(ready)
            finally:
                self.prepared.admitting(-1)

    def _admit(self, ready: Ready) -> None:
        started = time.thread_time()
        try:
            request = self.handler.admit(ready)
        except Exception as error:  # noqa: BLE001 - the stage outlives any one request
            self.logger.error(
                f"the observation of {ready.key!r} could not be admitted: {type(error).__name__}: "
                f"{error}"
            )
            self.scheduler.release(ready.key)
            return
        request.host_cpu_s = time.thread_time() - started
        if request.prepared is None:
            self.finished.put(request)  # refused or failed: answered on its own, never forwarded
        else:
            self.prepared.put(request)

    # ---- stage 2 ---------------------------------------------------------

    def _forward_loop(self) -> None:
        while True:
            stopping = self._stopping.is_set()
            batch = self.prepared.take_all(
                self.scheduler.max_batch_size,
                self.scheduler.batch_window_s,
                _STOP_POLL_S if stopping else POLL_S,
            )
            if batch:
                self._run(batch)
            elif (
                stopping
                and not any(thread.is_alive() for thread in self._admission)
                and not len(self.prepared)
            ):
                return

    def _run(self, batch: list[ServedRequest]) -> None:
        current = []
        for request in batch:
            if self.scheduler.has_newer(request.key):
                request.supersede()
                self.finished.put(request)
            else:
                current.append(request)
        handed: set[int] = set()
        try:
            for forward in self.handler.forward(current):
                if forward.actions is not None:
                    self.stats.record_forward(len(forward.requests))
                    self._observe_forward(len(forward.requests), forward.inference_s)
                handed.update(id(request) for request in forward.requests)
                self.finished.put(forward)
        except Exception as error:  # noqa: BLE001 - e.g. a batch key that cannot be computed: fail only these
            for request in current:
                if id(request) not in handed:
                    request.fail(error)
                    self.finished.put(request)

    # ---- stage 3 ---------------------------------------------------------

    def _finish_loop(self) -> None:
        while True:
            try:
                item = self.finished.get(
                    timeout=_STOP_POLL_S if self._stopping.is_set() else POLL_S
                )
            except queue.Empty:
                if (
                    self._stopping.is_set()
                    and not self._forward.is_alive()
                    and self.finished.empty()
                ):
                    return
                continue
            self._deliver(item)

    def _deliver(self, item: Forward | ServedRequest) -> None:
        started, cpu_started = time.monotonic(), time.thread_time()
        requests = item.requests if isinstance(item, Forward) else [item]
        try:
            if isinstance(item, Forward):
                self.handler.finish(item)
        except Exception as error:  # noqa: BLE001
            for request in requests:
                request.fail(error)
        cpu_share = (time.thread_time() - cpu_started) / len(requests)
        for request in requests:
            answer_started = time.thread_time()
            try:
                outcome = self.handler.answer(request, started)
                report_outcome(self.stats, self.logger, request.key, outcome)
            except Exception as error:  # noqa: BLE001
                self.logger.error(
                    f"the reply to {request.key!r} could not be delivered: "
                    f"{type(error).__name__}: {error}"
                )
            finally:
                self.scheduler.release(request.key, superseded=request.outcome == "superseded")
            if request.outcome == "ok":
                self._observe_host(
                    request.host_cpu_s + cpu_share + time.thread_time() - answer_started
                )
