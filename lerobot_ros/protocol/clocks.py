"""Which clock an instant is on, at the one place a ROS message's middleware stamp is read.

Invariant (architecture §4, the clock rule): wall-clock instants never cross
machines and never enter a computation of the executor or the server; a
middleware reception stamp, taken on the system clock of this host, is turned
into an instant on this process's monotonic clock as it is read.
"""

from __future__ import annotations


def received_monotonic_s(message_info: dict, wall_now_ns: int, monotonic_now_s: float) -> float:
    """When the middleware received a message, on the monotonic clock, from its rmw message info.

    The middleware stamps receptions on the system clock (``received_timestamp``,
    ns); an RMW that leaves it 0 is read by the publisher's ``source_timestamp``,
    and one that fills neither by now. A stamp in the future (a clock step) is
    now: an age is never negative.
    """
    stamp = message_info.get("received_timestamp") or message_info.get("source_timestamp") or 0
    if stamp <= 0:
        return monotonic_now_s
    return monotonic_now_s - max(0, wall_now_ns - stamp) / 1e9
