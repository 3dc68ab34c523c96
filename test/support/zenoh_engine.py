"""Running Zenoh configs in the real Zenoh engine (eclipse-zenoh), in this process, on loopback.

Shared by the tests that run the shipped router ACL (test_zenoh_acl_engine.py)
and the generated deployment (test_zenoh_deployment.py): keys named the way
rmw_zenoh names topics (<domain id>/<topic>/<type>/<type hash>), config
access by path, the trusted local session of ``session.json5``, and bounded
waits: a permitted message must arrive within DELIVERY_BOUND_S, and a denied
one must stay away while permitted traffic on the same sessions flows for
SILENCE_S. Import it after ``pytest.importorskip("zenoh")``.
"""

from __future__ import annotations

import json
import threading
import time

import zenoh

from lerobot_ros.protocol import names
from support.paths import REPO

CONFIG_DIR = REPO / "config" / "zenoh"
HASH = "RIHS01_" + "cd" * 32
DELIVERY_BOUND_S = 5.0  # a permitted message must arrive within this
# a denied one must not arrive while permitted traffic on the same sessions flows this long
SILENCE_S = 1.0


# --- keys, as rmw_zenoh names them ---------------------------------------------------------------


def topic_key(namespace: str, topic: str, type_name: str, domain: int = 0) -> str:
    return f"{domain}/{namespace}/{topic}/lerobot_ros::msg::dds_::{type_name}_/{HASH}"


def observation_key(client_id: str, namespace: str = "lerobot") -> str:
    return topic_key(namespace, names.observation_topic(client_id), "Observation")


def chunk_key(client_id: str, namespace: str = "lerobot") -> str:
    return topic_key(namespace, names.action_chunk_topic(client_id), "ActionChunk")


# --- configs
# ---------------------------------------------------------------------------------------


def get(config: "zenoh.Config", path: str):
    return json.loads(config.get_json(path))


def put(config: "zenoh.Config", path: str, value) -> None:
    config.insert_json5(path, json.dumps(value))


def local_config(tcp_port: int) -> "zenoh.Config":
    """session.json5, the config of every local ROS process, pointed at a router's loopback TCP
    port."""
    config = zenoh.Config.from_file(str(CONFIG_DIR / "session.json5"))
    put(config, "connect/endpoints", [f"tcp/127.0.0.1:{tcp_port}"])
    put(config, "listen/endpoints", ["tcp/127.0.0.1:0"])
    return config


def flatten(value, prefix=""):
    """(path, leaf) of a config section, e.g. ("transport/link/tls/enable_mtls", True)."""
    if isinstance(value, dict):
        for name, item in value.items():
            yield from flatten(item, f"{prefix}/{name}" if prefix else name)
    else:
        yield prefix, value


class Sessions:
    """Sessions opened by one test, closed in reverse order at its end (use as the body of a
    fixture)."""

    def __init__(self) -> None:
        self.opened = []

    def __call__(self, config: "zenoh.Config"):
        session = zenoh.open(config)
        self.opened.append(session)
        return session

    def close(self) -> None:
        for session in reversed(self.opened):
            session.close()


# --- traffic
# ---------------------------------------------------------------------------------------


class Inbox:
    """Samples received by one subscriber, keyed by key expression."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.keys: list[str] = []

    def __call__(self, sample) -> None:
        with self._lock:
            self.keys.append(str(sample.key_expr))
            self._lock.notify_all()

    def got(self, key: str) -> bool:
        with self._lock:
            return key in self.keys

    def wait_for(self, key: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while key not in self.keys:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True


def deliver(publisher, permitted: str, inbox: Inbox, denied=()) -> bool:
    """Put on ``permitted`` until it arrives in ``inbox``, sending each ``denied`` (session, key)
    alongside.

    Returns whether ``permitted`` arrived within DELIVERY_BOUND_S. After it
    arrives the puts go on for SILENCE_S, so that a denied message, sent over
    sessions and routes shown to work, has had that long to arrive: the
    caller then checks it did not, with ``inbox.got``.
    """
    deadline = time.monotonic() + DELIVERY_BOUND_S
    arrived = False
    while time.monotonic() < deadline:
        publisher.put(permitted, b"permitted")
        for session, key in denied:
            session.put(key, b"denied")
        if not arrived and inbox.wait_for(permitted, 0.05):
            arrived = True
            deadline = time.monotonic() + (SILENCE_S if denied else 0.0)
    return arrived


def answers(session, selector) -> list[bytes]:
    """Every reply to one query from every queryable outside ``session``, unconsolidated (bounded:
    2 s)."""
    replies = session.get(
        selector,
        target=zenoh.QueryTarget.ALL,
        consolidation=zenoh.ConsolidationMode.NONE,
        allowed_destination=zenoh.Locality.REMOTE,
        timeout=2.0,
    )
    return sorted(reply.ok.payload.to_bytes() for reply in replies if reply.ok is not None)
