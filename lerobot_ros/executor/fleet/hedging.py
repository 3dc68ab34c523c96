"""Zero-gap failover: the warm standby session and the hedged request.

A robot in a fleet keeps a second session open on another ready replica of
the same model (the *standby*): its data plane is built and matched, the
server holds its place (never collected while it waits, counted in its
capacity) and runs nothing for it. When the answer to a request is late
past the *hedge deadline*, the same observation, built afresh for the
standby session, goes there too, and whichever valid chunk arrives first
is merged; if it is the standby's, the robot moves there (promotion) and a
new standby is opened elsewhere. A replica lost for any other reason (its
heartbeat silent, gone from the ROS graph, restarted, draining) promotes
the standby at once instead of a whole placement.

Invariants:

* the hedge deadline follows the measured round trip: ``factor`` times its
  windowed p95, never below ``min_deadline_s``; until ``MIN_SAMPLES`` round
  trips are measured there is none (nothing to derive it from: the request
  timeout decides), and it never reaches the request timeout (a hedge after
  giving up is no hedge);
* while a standby is armed, the request trigger leaves room for a hedge:
  the queue must still cover the deadline plus a round trip
  (``hedge_allowance_s``), so a hedged answer lands before the queue runs
  dry; the trigger's caps still hold (``trigger.py``), so at a round trip
  near a chunk's duration the allowance is cut and a hedge may come late;
* a standby is only used while its replica is heard: its heartbeat within
  the heartbeat timeout, the same instance, not draining.

Plain Python; the executor core owns one ``Standby`` at most and applies
these rules under its lock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lerobot_ros.executor.session.handshake_types import SessionGrant

#: Round trips measured before a hedge deadline is derived from them.
MIN_SAMPLES = 5


def hedge_deadline_s(
    latency_p95_s: float,
    samples: int,
    factor: float,
    min_deadline_s: float,
    request_timeout_s: float,
) -> float | None:
    """Seconds after a request leaves at which it is hedged, or None (not enough measured, or past
    the timeout)."""
    if samples < MIN_SAMPLES or not math.isfinite(latency_p95_s):
        return None
    deadline = max(min_deadline_s, factor * latency_p95_s)
    return deadline if deadline < request_timeout_s else None


def hedge_allowance_s(deadline_s: float | None, latency_p95_s: float) -> float:
    """Queued playback time a request must leave with so its hedge still lands in time (0: no
    hedge)."""
    return 0.0 if deadline_s is None else deadline_s + latency_p95_s


@dataclass
class Standby:
    """The warm standby session: where, the grant (promotion turns it into the session), and its
    liveness."""

    replica: str
    grant: SessionGrant
    instance_id: str
    heard_at: float  # the latest heartbeat of its replica's instance (its opening, at first)
    # a hedge went there and lost the race: the server promoted it, so it is re-armed
    used: bool = False

    @property
    def session_id(self) -> str:
        return self.grant.session_id

    def heard(self, instance_id: str, now_s: float, draining: bool) -> str:
        """One heartbeat of the standby's replica: "" while usable, else why the standby is
        gone."""
        if instance_id != self.instance_id:
            return (
                f"standby replica {self.replica} restarted (instance {self.instance_id} -> "
                f"{instance_id})"
            )
        if draining:
            return f"standby replica {self.replica} is draining"
        self.heard_at = now_s
        return ""

    def usable(self, now_s: float, heartbeat_timeout_s: float) -> bool:
        return not self.used and now_s - self.heard_at <= heartbeat_timeout_s


@dataclass(frozen=True)
class HedgeCounts:
    """Hedging since start-up, for ~/status."""

    sent: int = 0
    won: int = 0
    promotions: int = 0
