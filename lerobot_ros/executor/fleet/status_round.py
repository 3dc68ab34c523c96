"""One GetStatus round over a fleet's candidate replicas: all asked at once, the round bounded by
one timeout.

Invariants:

* every replica of a round is asked at the same moment, each on a thread of
  its own, so a placement over N replicas costs the slowest answer (at most
  the one timeout), never the sum of N timeouts: a killed or hung replica
  delays the others by nothing;
* the round ends by ``timeout_s`` (plus ``GRACE_S`` for an answer to be
  handed over): a replica without an answer by then is reported as not
  answering, whatever its call returns later (that answer is dropped);
* the answers come back in the order asked, so ranking ties keep the list
  order.

``pump(until)``: while nothing else spins the ROS node (a configure before
the executor spins), the calling thread does, and the asking threads only
wait for their answers. Plain Python (no rclpy): the ``ask`` and ``pump``
callables are the server link's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

#: Time for an answer that arrived on time to reach the round (seconds).
GRACE_S = 0.1
#: The longest one ``pump`` call may block before the round looks at its answers again (seconds).
PUMP_S = 0.02


def not_answering(namespace: str, timeout_s: float) -> str:
    return f"no policy server answered on {namespace} within {timeout_s:g} s"


def ask_all(
    ask: Callable[[str], T | str],
    namespaces: Sequence[str],
    timeout_s: float,
    pump: Callable[[float], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> list[tuple[str, T | str]]:
    """``ask(namespace)`` for every namespace at once; (namespace, answer or why none), in order.

    Each ``ask`` is expected to bound itself by ``timeout_s``; the round does
    not wait longer whatever it does. An exception is that replica's answer, as text.
    """
    if not namespaces:
        return []
    answers: dict[str, T | str] = {}
    lock, all_in = threading.Lock(), threading.Event()

    def run(namespace: str) -> None:
        try:
            answer = ask(namespace)
        except Exception as error:  # noqa: BLE001 - one replica's failure is its answer, not the round's
            answer = f"{namespace}: get_status failed: {type(error).__name__}: {error}"
        with lock:
            answers[namespace] = answer
            if len(answers) == len(namespaces):
                all_in.set()

    deadline = clock() + timeout_s + GRACE_S
    for namespace in namespaces:
        threading.Thread(
            target=run, args=(namespace,), name=f"lerobot_ros_status {namespace}", daemon=True
        ).start()
    while not all_in.is_set() and (remaining := deadline - clock()) > 0:
        if pump is None:
            all_in.wait(remaining)
        else:
            pump(min(remaining, PUMP_S))
    with lock:
        return [
            (namespace, answers.get(namespace, not_answering(namespace, timeout_s)))
            for namespace in namespaces
        ]
