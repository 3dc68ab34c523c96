"""An observation's way from the subscription callback to the session's mailbox, and the flood
rule's actions.

Invariants:
- an observation refused on arrival is never answered (the chunk topic
  belongs to the session's owner, and a chunk for an unproven or repeated
  message could end the owner's wait): it is counted (server-wide in
  ``requests_rejected``, per client in the status topic), audited in
  aggregate (``ArrivalGuard``) and logged at most once a second;
- the order of the work is cheapest first: the flood gate (a dict look-up),
  then the session's cheap checks, then the MAC (``SessionRegistry.admit_observation``);
- the observation that promotes a standby session is reported once, by
  ``promoted``, after it was admitted;
- a session the flood rule marks is closed from the garbage-collection timer
  (``close_floods``), with its reason in the log, the audit and the status,
  never from inside its own subscription's callback.

Plain Python: the node passes its registry, scheduler, counters, audit and
logger, and the function that ends a session.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from lerobot_ros.protocol.contract import truncated
from lerobot_ros.protocol.wire.data_plane import request_id_of
from lerobot_ros.server.requests.request_records import arrival_refusal_record
from lerobot_ros.server.sessions.flood_guard import ArrivalGuard, FloodPolicy, Gate
from lerobot_ros.server.sessions.registry import Session, SessionRegistry


def flood_policy(settings) -> FloodPolicy:
    """The flood rule's parameters from the server's settings."""
    return FloodPolicy(
        refusals_per_s=settings.flood_refusals_per_s,
        close_after_s=settings.flood_close_after_s,
        backoff_initial_s=settings.flood_backoff_initial_s,
        backoff_max_s=settings.flood_backoff_max_s,
        audit_window_s=settings.refusal_audit_window_s,
    )


@dataclasses.dataclass
class ArrivalDesk:
    sessions: SessionRegistry
    guard: ArrivalGuard
    deposit: Callable[[str, object], bool]  # True when it superseded a waiting observation
    count_rejected: Callable[[], None]
    warn: Callable[[str], None]  # throttled by the caller
    max_id_chars: int = 128
    # Called with a standby session its first admitted observation promoted (log and audit it).
    promoted: Callable[[Session], None] | None = None

    def on_observation(self, client_id: str, msg, now: float) -> None:
        if self.guard.gate(client_id, now) is Gate.DROP:
            return
        refusal = self.sessions.admit_observation(client_id, msg, now, self.promoted)
        if refusal is None:
            if self.deposit(client_id, msg):
                self.guard.strike(
                    client_id,
                    "superseded: an observation arrived while the previous one still "
                    "waited (more than one request in flight)",
                    now,
                )
            return
        self.count_rejected()
        request = dataclasses.replace(
            request_id_of(msg),
            client_id=client_id,
            session_id=truncated(msg.session_id, self.max_id_chars),
        )
        self.guard.refused(
            client_id, refusal.kind, str(refusal), now, arrival_refusal_record(request, refusal)
        )
        self.warn(f"observation on the topic of {client_id} refused on arrival: {refusal}")

    def close_floods(
        self, end_session: Callable[[object, str], bool], audit: Callable[[dict], None], now: float
    ) -> list[tuple[str, str, float]]:
        """Close the sessions the flood rule marked; return (client id, reason, backoff s) of
        each."""
        closed = []
        for client_id, reason in self.guard.due_closures():
            session = self.sessions.get(client_id)
            why = f"flood: {reason}"
            if session is not None:
                end_session(session, why)
            backoff_s = self.guard.closed(client_id, reason, now)
            audit(
                {
                    "wall_time": round(time.time(), 6),
                    "session": session.session_id if session is not None else "",
                    "client": client_id,
                    "outcome": "session_closed_for_flood",
                    "error": why,
                    "reopen_refused_for_s": backoff_s,
                }
            )
            closed.append((client_id, why, backoff_s))
        self.guard.flush(now, {session.client_id for session in self.sessions.sessions()})
        return closed
