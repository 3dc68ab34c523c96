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

``Scheduler`` is the seam: the worker only calls ``take``; ROS callbacks only
call ``deposit``. A micro-batching scheduler (several sessions in one forward
pass) would implement the same interface.
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

    def take(self, key: Hashable) -> Ready:
        ready = Ready(key, self._item, self._deposited_at, self._superseded)
        self._item, self._full, self._superseded = None, False, 0
        return ready


class RoundRobinScheduler:
    """Fair round-robin over sessions with a waiting observation."""

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._condition = threading.Condition()
        self._mailboxes: dict[Hashable, Mailbox] = {}
        self._order: list[Hashable] = []  # rotation; the front is served first
        self._orphans: deque[Ready] = deque()  # waiting when their session was removed
        self._closed = False

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
        deadline = self._clock() + timeout_s
        with self._condition:
            while not self._closed:
                if self._orphans:
                    return self._orphans.popleft()
                for position, key in enumerate(self._order):
                    mailbox = self._mailboxes[key]
                    if mailbox.full:
                        # Served sessions go to the back of the rotation.
                        self._order.append(self._order.pop(position))
                        return mailbox.take(key)
                remaining = deadline - self._clock()
                if remaining <= 0:
                    return None
                self._condition.wait(remaining)
            return None

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
            return len(self._orphans) + sum(1 for mailbox in self._mailboxes.values() if mailbox.full)

    def close(self) -> list[Ready]:
        """Wake the worker; every later ``take`` returns None. Returns the
        observations still waiting, so a draining server can answer them."""
        with self._condition:
            self._closed = True
            waiting = list(self._orphans)
            self._orphans.clear()
            for key in self._order:
                if self._mailboxes[key].full:
                    waiting.append(self._mailboxes[key].take(key))
            self._condition.notify_all()
            return waiting
