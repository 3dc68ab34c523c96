"""Observations refused on arrival: counted per client, audited in aggregate, and floods throttled.

Invariants:
- a session's refusals cost the server a bounded amount: at most
  ``refusals_per_s`` of its observations per second are refused after being
  checked; once that budget is spent, its further observations that second
  are dropped before any check (``gate``), the cheapest place short of
  destroying the subscription;
- a session over the budget for ``close_after_s`` consecutive seconds is
  marked for closure with the reason (``due_closures``; the node closes it
  and destroys its data plane from its garbage-collection timer, never from
  inside the subscription's own callback), and its client id may not open a
  session again for a backoff that doubles with each closure, from
  ``backoff_initial_s`` up to ``backoff_max_s`` (``reopen_refusal``); the
  count of closures is forgotten after ``FORGET_CLOSURES_AFTER`` backoffs
  without one;
- an observation that supersedes a waiting one (a client with more than
  one request in flight) counts against the same budget as a refusal on
  arrival (``strike``): a flood with valid MACs is a flood too. One the
  worker rejects does not: a client with one request in flight waits for
  each answer, so its rejections cost the server no more than its requests,
  and such a client is never throttled;
- the audit log gets at most ``FULL_LINES_PER_WINDOW`` full lines per client
  and reason kind in each ``audit_window_s``, then one summary line with the
  count when the window ends (``flush``);
- what is reported (``report``) per client id is the count, the last reason
  and the backoff left: the reasons only echo what the sender sent and the
  session's epoch and last seq (both on the wire anyway), never a secret, a
  MAC or another session's id.

Plain Python, one lock: the subscription callbacks, the worker and the
timers call it.
"""

from __future__ import annotations

import enum
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Full audit lines per client and reason kind in one window; the rest go into the window's summary
#: line.
FULL_LINES_PER_WINDOW = 8
#: A client id's closures are forgotten after this many maximal backoffs without one.
FORGET_CLOSURES_AFTER = 10
#: Seconds a client id with no session and no backoff stays in the report after its last refusal.
REPORT_KEEP_S = 60.0


@dataclass(frozen=True)
class FloodPolicy:
    refusals_per_s: int = 20
    close_after_s: float = 2.0
    backoff_initial_s: float = 5.0
    backoff_max_s: float = 120.0
    audit_window_s: float = 10.0

    def problems(self) -> list[str]:
        found = []
        if self.refusals_per_s < 1:
            found.append(f"refusals_per_s must be >= 1, got {self.refusals_per_s}")
        if self.close_after_s <= 0 or self.audit_window_s <= 0:
            found.append(
                f"close_after_s and audit_window_s must be > 0, got {self.close_after_s}, "
                f"{self.audit_window_s}"
            )
        if not 0 < self.backoff_initial_s <= self.backoff_max_s:
            found.append(
                f"backoff must satisfy 0 < initial <= max, got {self.backoff_initial_s} and "
                f"{self.backoff_max_s}"
            )
        return found


class Gate(enum.Enum):
    CHECK = "check"  # run the arrival checks
    DROP = "drop"  # over this second's budget, or closing: drop unchecked


@dataclass(frozen=True)
class ClientRefusals:
    """What the status topic says about one client id."""

    client_id: str
    refused: int
    last_reason: str
    reopen_refused_for_s: float


@dataclass
class _Window:
    started: float
    count: int = 0
    full_lines: int = 0
    first: str = ""
    last: str = ""


@dataclass
class _Client:
    refused: int = 0
    last_reason: str = ""
    last_at: float = 0.0
    second: int = -1
    in_second: int = 0
    over_second: int = -2  # the last whole second the budget was exceeded in
    over_since: int = -1
    closing: str = ""
    closed_reason: str = ""
    closures: int = 0
    last_closure: float = -math.inf
    reopen_at: float = -math.inf
    windows: dict[str, _Window] = field(default_factory=dict)


class ArrivalGuard:
    """Per-client refusal counts, the flood rule and the aggregated audit. ``audit(record)`` writes
    a line."""

    def __init__(self, policy: FloodPolicy, audit: Callable[[dict], None]) -> None:
        problems = policy.problems()
        if problems:
            raise ValueError("; ".join(problems))
        self.policy = policy
        self._audit = audit
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}

    # ---- the flood rule ---------------------------------------------------

    def gate(self, client_id: str, now: float) -> Gate:
        """Before any check of an arriving observation: whether to check it at all."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is None:
                return Gate.CHECK
            if client.closing:
                return Gate.DROP
            second = math.floor(now)
            if client.second == second and client.in_second >= self.policy.refusals_per_s:
                client.refused += 1
                self._over(client, client_id, second, "dropped unchecked")
                window = client.windows.setdefault(
                    "dropped_unchecked", _Window(started=now, first="over the budget")
                )
                window.count += 1
                return Gate.DROP
            return Gate.CHECK

    def refused(self, client_id: str, kind: str, text: str, now: float, record: dict) -> None:
        """An observation refused on arrival, with its audit line (written, or counted in the
        window)."""
        ended = None
        with self._lock:
            client = self._strike(client_id, f"{kind}: {text}", now, on_arrival=True)
            window = client.windows.get(kind)
            if window is None or now - window.started >= self.policy.audit_window_s:
                ended = _summary(client_id, kind, window, now) if window is not None else None
                window = client.windows[kind] = _Window(started=now, first=text)
            window.count += 1
            window.last = text
            write = window.full_lines < FULL_LINES_PER_WINDOW
            window.full_lines += write
        for line in filter(None, (ended, record if write else None)):
            self._audit(line)

    def strike(self, client_id: str, reason: str, now: float) -> None:
        """An admitted observation that superseded a waiting one (more than one in flight): it
        counts
        against the budget, not in the report (the client saw the rejection; the report is for
        arrivals)."""
        with self._lock:
            self._strike(client_id, reason, now, on_arrival=False)

    def _strike(self, client_id: str, reason: str, now: float, on_arrival: bool) -> _Client:
        client = self._clients.setdefault(client_id, _Client())
        client.last_at = now
        if on_arrival:
            client.refused += 1
            client.last_reason = reason
        second = math.floor(now)
        if client.second != second:
            client.second, client.in_second = second, 0
        client.in_second += 1
        if client.in_second >= self.policy.refusals_per_s:
            self._over(client, client_id, second, reason)
        return client

    def _over(self, client: _Client, client_id: str, second: int, reason: str) -> None:
        if client.over_second == second:
            return
        client.over_since = client.over_since if client.over_second == second - 1 else second
        client.over_second = second
        # Whole seconds over the budget, this one included.
        if second - client.over_since + 1 > self.policy.close_after_s and not client.closing:
            client.closing = (
                f"observations refused at {self.policy.refusals_per_s}/s or more for "
                f"{second - client.over_since + 1} s in a row (last: {reason})"
            )

    def due_closures(self) -> list[tuple[str, str]]:
        """(client id, reason) of sessions to close now; the caller closes each, then calls
        ``closed``."""
        with self._lock:
            return [
                (client_id, client.closing)
                for client_id, client in self._clients.items()
                if client.closing
            ]

    def closed(self, client_id: str, reason: str, now: float) -> float:
        """The client's session was closed for flooding: start its backoff; return its length
        (s)."""
        with self._lock:
            client = self._clients.setdefault(client_id, _Client())
            if now - client.last_closure > FORGET_CLOSURES_AFTER * self.policy.backoff_max_s:
                client.closures = 0
            client.closures += 1
            backoff = min(
                self.policy.backoff_max_s,
                self.policy.backoff_initial_s * 2 ** (client.closures - 1),
            )
            client.last_closure, client.reopen_at = now, now + backoff
            client.closing, client.in_second, client.over_since, client.over_second = "", 0, -1, -2
            client.closed_reason = client.last_reason = f"session closed: flood: {reason}"
            client.last_at = now
            return backoff

    def reopen_refusal(self, client_id: str, now: float) -> str | None:
        """Why ``client_id`` may not open a session now (its backoff after a flood), or None."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is None or now >= client.reopen_at:
                return None
            return (
                f"client id {client_id!r} had its session closed for flooding "
                f"({client.closed_reason.removeprefix('session closed: flood: ')}); "
                f"it may open a session again in {client.reopen_at - now:.1f} s "
                f"(backoff {client.reopen_at - client.last_closure:g} s after closure "
                f"{client.closures})"
            )

    def session_opened(self, client_id: str) -> None:
        """A new session starts with a fresh per-second budget (its count and reason stay
        reported)."""
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None:
                client.closing, client.in_second, client.over_since, client.over_second = (
                    "",
                    0,
                    -1,
                    -2,
                )

    # ---- reporting --------------------------------------------------------

    def flush(self, now: float, live_clients: set[str] | frozenset[str] = frozenset()) -> None:
        """Write the summary lines of windows that ended; forget clients with nothing left to
        report."""
        summaries = []
        with self._lock:
            for client_id, client in list(self._clients.items()):
                for kind, window in list(client.windows.items()):
                    if now - window.started >= self.policy.audit_window_s:
                        summaries.append(_summary(client_id, kind, window, now))
                        del client.windows[kind]
                idle = (
                    now - client.last_at > REPORT_KEEP_S
                    and now >= client.reopen_at
                    and not client.closing
                )
                if idle and client_id not in live_clients and not client.windows:
                    del self._clients[client_id]
        for line in filter(None, summaries):
            self._audit(line)

    def report(self, now: float) -> list[ClientRefusals]:
        with self._lock:
            # During a backoff the closure is the reason that matters (late arrivals only say "no
            # session").
            return [
                ClientRefusals(
                    client_id,
                    client.refused,
                    client.closed_reason if now < client.reopen_at else client.last_reason,
                    max(0.0, client.reopen_at - now),
                )
                for client_id, client in sorted(self._clients.items())
                if client.last_reason
            ]


def _summary(client_id: str, kind: str, window: _Window, now: float) -> dict | None:
    """The window's summary line, when more happened than its full lines said."""
    if window.count <= window.full_lines:
        return None
    # The keys every audit line has (request_path's header), so a reader can filter any line by
    # client.
    return {
        "wall_time": round(time.time(), 6),
        "session": "",
        "client": client_id,
        "outcome": "refused_on_arrival_summary",
        "reason": kind,
        "count": window.count,
        "window_s": round(now - window.started, 3),
        "first_error": window.first,
        "last_error": window.last,
    }
