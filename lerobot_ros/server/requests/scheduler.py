"""Which session the inference worker serves next.

Invariants: newest observation wins — each session has a one-slot mailbox,
and an observation that arrives before the previous one was taken replaces
it and is counted as superseded (the count rides on that session's next
chunk); and no session starves — ready sessions are served in round-robin
order, so a client that publishes fast cannot take turns from a slow one.
Every deposited observation reaches the worker, taken or counted as
superseded: one left waiting when its session is removed (closed, collected
or replaced) is handed over first, so it too gets its audit line (the request
path answers it without inference: its session is gone or no longer open).

Micro-batching: ``take_batch`` hands the worker up to ``max_batch_size``
ready sessions at once, in the same round-robin order, each at most once and
with its newest observation; with ``batch_window_s`` > 0 it waits up to that
long after the first for more sessions to become ready (0: only those ready
now), and not at all once every known session is in the batch (a lone robot
never waits). Sessions chosen during the window stay in their mailboxes until the
window closes, so a newer observation still wins. ``max_batch_size`` 1 is
plain round-robin.

One request in flight per session (the pipeline, pipeline.py): ``hold``
takes one observation and keeps its session out of every later take until
``release``; observations arriving meanwhile wait in its mailbox, newest
winning. So a session's processors never run on two threads at once, and
``has_newer`` tells a stage that the request it holds has been overtaken.

``Scheduler`` is the seam: the workers only take and release; ROS
callbacks only call ``deposit``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class Ready:
    """One observation handed to the worker."""

    key: Hashable
    item: Any
    deposited_at: float  # monotonic, for the queue-wait duration
    superseded: int  # observations of this session dropped since its previous take


class Scheduler(Protocol):
    def deposit(self, key: Hashable, item: Any) -> bool: ...
    def take(self, timeout_s: float) -> Ready | None: ...
    def take_batch(self, timeout_s: float) -> list[Ready]: ...
    def hold(self, timeout_s: float) -> Ready | None: ...
    def release(self, key: Hashable, superseded: bool = False) -> None: ...
    def has_newer(self, key: Hashable) -> bool: ...
    def remove(self, key: Hashable) -> None: ...
    def pending(self) -> int: ...
    def close(self) -> list[Ready]: ...


class Mailbox:
    """A one-slot, newest-wins mailbox. Not thread-safe on its own: the scheduler locks."""

    def __init__(self) -> None:
        self._item: Any = None
        self._full = False
        self._deposited_at = 0.0
        self._superseded = 0

    @property
    def full(self) -> bool:
        return self._full

    def deposit(self, item: Any, now: float) -> bool:
        """Store ``item``; return True when it replaced one that was never taken."""
        replaced = self._full
        if replaced:
            self._superseded += 1
        self._item, self._full, self._deposited_at = item, True, now
        return replaced

    def count_superseded(self) -> None:
        """One more observation of this session dropped: reported with the next one taken."""
        self._superseded += 1

    def take(self, key: Hashable) -> Ready:
        ready = Ready(key, self._item, self._deposited_at, self._superseded)
        self._item, self._full, self._superseded = None, False, 0
        return ready


class RoundRobinScheduler:
    """Fair round-robin over sessions with a waiting observation, up to ``max_batch_size`` at a
    time."""

    def __init__(
        self, clock=time.monotonic, max_batch_size: int = 1, batch_window_s: float = 0.0
    ) -> None:
        self._clock = clock
        self._condition = threading.Condition()
        self.set_batching(max_batch_size, batch_window_s)
        self._mailboxes: dict[Hashable, Mailbox] = {}
        self._order: list[Hashable] = []  # rotation; the front is served first
        self._orphans: deque[Ready] = deque()  # waiting when their session was removed
        self._held: set[Hashable] = set()  # sessions with a request in the pipeline (``hold``)
        self._closed = False

    def set_batching(self, max_batch_size: int, batch_window_s: float) -> None:
        """New batch bounds (a runtime parameter change); the next ``take_batch`` uses them."""
        if max_batch_size < 1 or batch_window_s < 0:
            raise ValueError(
                f"max_batch_size must be >= 1 and batch_window_s >= 0; got {max_batch_size} and "
                f"{batch_window_s}"
            )
        with self._condition:
            self.max_batch_size, self.batch_window_s = max_batch_size, batch_window_s

    def deposit(self, key: Hashable, item: Any) -> bool:
        with self._condition:
            mailbox = self._mailboxes.get(key)
            if mailbox is None:
                mailbox = self._mailboxes[key] = Mailbox()
                self._order.append(key)
            replaced = mailbox.deposit(item, self._clock())
            self._condition.notify()
            return replaced

    def take(self, timeout_s: float) -> Ready | None:
        """The next observation in round-robin order, waiting up to ``timeout_s``."""
        batch = self._take(timeout_s, 1, 0.0)
        return batch[0] if batch else None

    def take_batch(self, timeout_s: float) -> list[Ready]:
        """Up to ``max_batch_size`` observations of distinct sessions, in round-robin order;
        empty after ``timeout_s`` without any, or once closed. An orphan comes alone."""
        return self._take(timeout_s, self.max_batch_size, self.batch_window_s)

    def hold(self, timeout_s: float) -> Ready | None:
        """Like ``take``, and its session is taken by nobody until ``release``: one request in
        flight per session."""
        batch = self._take(timeout_s, 1, 0.0, hold=True)
        return batch[0] if batch else None

    def release(self, key: Hashable, superseded: bool = False) -> None:
        """The held request of ``key`` is answered (or, ``superseded``, dropped for a newer one,
        which counts it)."""
        with self._condition:
            self._held.discard(key)
            mailbox = self._mailboxes.get(key)
            if superseded and mailbox is not None:
                mailbox.count_superseded()
            self._condition.notify()

    def has_newer(self, key: Hashable) -> bool:
        """Whether an observation of ``key`` waits that arrived after the one taken."""
        with self._condition:
            mailbox = self._mailboxes.get(key)
            return mailbox is not None and mailbox.full

    def _take(
        self, timeout_s: float, size: int, window_s: float, hold: bool = False
    ) -> list[Ready]:
        deadline = self._clock() + timeout_s
        with self._condition:
            while not self._closed:
                if self._orphans:
                    orphan = self._orphans.popleft()
                    if hold:
                        self._held.add(orphan.key)
                    return [orphan]
                chosen = self._ready_keys(size, ())
                if chosen:
                    window_end = self._clock() + window_s
                    # Only sessions this scheduler knows can join: with all of them chosen, the
                    # window is over.
                    while (
                        len(chosen) < min(size, len(self._mailboxes))
                        and not self._closed
                        and (remaining := window_end - self._clock()) > 0
                    ):
                        self._condition.wait(remaining)
                        chosen += self._ready_keys(size - len(chosen), chosen)
                    taken = self._take_chosen(chosen)
                    # under the same lock as the take: no second thread can take the session
                    # meanwhile
                    if hold:
                        self._held.update(ready.key for ready in taken)
                    return taken
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return []
                self._condition.wait(remaining)
            return []

    def _ready_keys(self, count: int, exclude) -> list[Hashable]:
        return [
            key
            for key in self._order
            if self._mailboxes[key].full and key not in exclude and key not in self._held
        ][:count]

    def _take_chosen(self, chosen: list[Hashable]) -> list[Ready]:
        # A session removed during the window left an orphan instead; it is answered next.
        taken = [
            self._mailboxes[key].take(key)
            for key in chosen
            if key in self._mailboxes and self._mailboxes[key].full
        ]
        for ready in taken:  # served sessions go to the back of the rotation, in the order served
            self._order.remove(ready.key)
            self._order.append(ready.key)
        return taken

    def remove(self, key: Hashable) -> None:
        """Forget a session; its waiting observation, if any, is handed to the worker next."""
        with self._condition:
            mailbox = self._mailboxes.pop(key, None)
            if mailbox is not None:
                self._order.remove(key)
                if mailbox.full:
                    self._orphans.append(mailbox.take(key))

    def pending(self) -> int:
        with self._condition:
            return len(self._orphans) + sum(
                1 for mailbox in self._mailboxes.values() if mailbox.full
            )

    def close(self) -> list[Ready]:
        """Wake the worker; every later ``take`` returns None. Returns the
        observations still waiting, so a draining server can answer them."""
        with self._condition:
            self._closed = True
            self._held.clear()
            waiting = list(self._orphans)
            self._orphans.clear()
            for key in self._order:
                if self._mailboxes[key].full:
                    waiting.append(self._mailboxes[key].take(key))
            self._condition.notify_all()
            return waiting
