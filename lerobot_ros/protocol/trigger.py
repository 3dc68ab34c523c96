"""When the next request leaves: a queue threshold that follows the measured round trip.

The next chunk is requested once the queued playback time falls to

    threshold = max(buffer_time_s,
                    min(max(p95 round trip x margin, hedge allowance) + one policy step, cap))
    cap = chunk duration, and in append mode also max_action_age_s - chunk duration
    hedge allowance = hedge deadline + p95 round trip while a standby is armed (hedging.py), else 0

Invariants:

* never below ``buffer_time_s``: the operator's floor holds whatever the
  latency does;
* rises with latency, so the queue still holds actions when the answer
  arrives, and falls back as the latency window (``statistics.py``) forgets
  slow round trips;
* with a standby armed, it leaves room for a hedge: a request hedged at its
  deadline is still answered (one more round trip) before the queue runs
  dry, as far as the caps below allow (past them a hedge may land late);
* the latency part never exceeds one chunk's duration: asking earlier than a
  whole chunk ahead cannot help (one request is in flight at a time) and
  would only make replace mode re-request at once;
* in append mode it never makes the executor drop its own actions: a chunk
  requested with T queued plays its last row about T + chunk duration after
  the observation, so the latency part stays below max_action_age_s minus
  one chunk (uncapped, a slow p95 on a loaded machine raised T until every
  chunk's tail went stale). Replace mode drops the queue at
  each merge, so a later request does not age its rows;
* one policy step, not one control tick, is added: the queue drains in whole
  rows, so the threshold is crossed up to one row late.

Plain Python; the executor core recomputes it when a chunk is merged or a
session opens and keeps the value for ``request_due`` and ``~/status``.
"""

from __future__ import annotations

import math


def request_threshold_s(
    buffer_time_s: float,
    latency_p95_s: float,
    margin: float,
    fps: float,
    chunk_size: int,
    max_action_age_s: float = math.inf,
    replace_mode: bool = False,
    hedge_allowance_s: float = 0.0,
) -> float:
    """The queued playback time (seconds) at which the next request is due.

    ``chunk_size`` 0 (no session yet) leaves the latency part unbounded.
    """
    for name, value in (("buffer_time_s", buffer_time_s), ("margin", margin), ("fps", fps)):
        if not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a finite number > 0, got {value}")
    if not (math.isfinite(latency_p95_s) and latency_p95_s >= 0):
        raise ValueError(
            f"latency_p95_s must be a finite number of seconds >= 0, got {latency_p95_s}"
        )
    if chunk_size < 0:
        raise ValueError(f"chunk_size must be >= 0 (0: not known yet), got {chunk_size}")
    if not (math.isfinite(hedge_allowance_s) and hedge_allowance_s >= 0):
        raise ValueError(
            f"hedge_allowance_s must be a finite number of seconds >= 0, got {hedge_allowance_s}"
        )
    latency_part = max(latency_p95_s * margin, hedge_allowance_s) + 1.0 / fps
    if chunk_size:
        chunk_s = chunk_size / fps
        latency_part = min(
            latency_part, chunk_s if replace_mode else min(chunk_s, max_action_age_s - chunk_s)
        )
    return max(buffer_time_s, latency_part)
