"""A sensor message kept as the bytes it arrived in, deserialized only when an observation needs it.

Invariant: a camera frame costs its subscription callback nothing but
keeping a reference to its bytes (rclpy raw subscriptions); it is turned
into a message at most once, and only when a request is built from it
(``ObservationAssembler.assemble`` on the network worker's thread). Frames
that are replaced before the next request are never deserialized, so
cameras at 30 Hz cost the executor's threads, and the control loop's GIL,
nothing between requests.

Plain Python: ``decode`` is given (rclpy's ``deserialize_message`` bound to
the message type in the node; anything callable in tests).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class SerializedMessage:
    """One message's serialized bytes and how to decode them; ``message()`` decodes once and keeps the result."""

    __slots__ = ("_data", "_decode", "_lock", "_message")

    def __init__(self, data: bytes, decode: Callable[[bytes], Any]) -> None:
        self._data: bytes | None = data
        self._decode = decode
        self._lock = threading.Lock()
        self._message: Any = None

    @property
    def decoded(self) -> bool:
        return self._data is None

    def message(self) -> Any:
        with self._lock:
            if self._data is not None:
                self._message = self._decode(self._data)
                self._data = None  # the bytes are not needed twice
            return self._message


def resolve(frame: Any) -> Any:
    """The message itself: deserialized now if it is still ``SerializedMessage`` bytes."""
    return frame.message() if isinstance(frame, SerializedMessage) else frame


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
