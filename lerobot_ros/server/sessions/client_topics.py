"""Each client's data plane: its observation subscription and action-chunk publisher.

Invariants:
- one pair of topics per client id, created when its first session opens;
- a client re-opening keeps its topics (its robot stays subscribed); only the
  session they belong to changes;
- a pair is destroyed only by the session it belongs to, so closing or
  collecting an old session never takes the topics of its replacement;
- a publisher is never destroyed while a chunk is being published on it (the
  inference worker publishes; services and the garbage collector destroy):
  one lock covers both.

Plain Python: the ROS entities are made and destroyed by the callables the
node passes in, so the bookkeeping is tested without rclpy.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ClientTopics:
    """The topics of one client and the session they currently belong to."""

    session_id: str
    subscription: Any
    publisher: Any


class ClientTopicTable:
    """``create(client_id) -> (subscription, publisher)``; ``destroy(topics)`` releases both."""

    def __init__(
        self, create: Callable[[str], tuple[Any, Any]], destroy: Callable[[ClientTopics], None]
    ) -> None:
        self._create = create
        self._destroy = destroy
        self._lock = threading.Lock()
        self._by_client: dict[str, ClientTopics] = {}

    def open(self, client_id: str, session_id: str) -> ClientTopics:
        """The client's topics, now belonging to ``session_id``; created on its first session."""
        with self._lock:
            old = self._by_client.get(client_id)
            if old is None:
                subscription, publisher = self._create(client_id)
            else:
                subscription, publisher = old.subscription, old.publisher
            topics = ClientTopics(session_id, subscription, publisher)
            self._by_client[client_id] = topics
            return topics

    def close(self, client_id: str, session_id: str) -> bool:
        """Destroy the client's topics if they still belong to ``session_id``; True if they did."""
        with self._lock:
            topics = self._by_client.get(client_id)
            if topics is None or topics.session_id != session_id:
                return False
            del self._by_client[client_id]
            self._destroy(topics)
            return True

    def publish(self, client_id: str, msg: Any) -> None:
        """Publish on the client's topic; nothing if it has none (closed meanwhile)."""
        with self._lock:
            topics = self._by_client.get(client_id)
            if topics is not None:
                topics.publisher.publish(msg)

    def publisher_count(self, client_id: str) -> int:
        """Publishers on the graph for the client's observation topic; 0 without topics."""
        with self._lock:
            topics = self._by_client.get(client_id)
            return topics.subscription.get_publisher_count() if topics is not None else 0
