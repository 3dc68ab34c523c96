"""Replica discovery: which policy servers of a fleet are on the ROS graph now.

A robot configured with ``server_namespaces: [auto]`` (or ``[auto:/prefix]``)
lists no replica: every ``policy_server_node`` announces itself through its
heartbeat, a ``lerobot_ros/msg/ServerStatus`` publisher on
``<namespace>/status``, and the executor reads the graph for those. Adding a
GPU server to the fleet then needs no change on any robot.

Invariants:

* a namespace is a replica only while a heartbeat publisher is on the graph
  under it: the snapshots given to ``ReplicaDiscovery.update`` hold topics
  that have a publisher (a topic kept on the graph by subscribers alone, such
  as this executor's own heartbeat subscription of a server that left, is no
  server). A snapshot is the whole truth: a replica missing from it is
  removed, one present is added;
* ``auto:/prefix`` keeps the namespaces at or under the prefix, name segment
  by segment: ``auto:/fleet_a`` finds ``/fleet_a/gpu0/lerobot`` but never
  ``/fleet_ab/lerobot``;
* the replicas are kept in name order, so with equal load two robots rank
  them as they would an explicit list written in that order.

Plain Python (no rclpy): the executor's server link takes the snapshots
(``server_link.py``) and the settings validate the spec with
``fleet_problem``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lerobot_ros.protocol import names

#: The one ``server_namespaces`` entry that asks for discovery instead of a list.
AUTO = "auto"
#: The heartbeat's type as the graph names it.
HEARTBEAT_TYPE = "lerobot_ros/msg/ServerStatus"
_HEARTBEAT_SUFFIX = "/" + names.STATUS
_NAMESPACE = re.compile(r"(/[A-Za-z_][A-Za-z0-9_]*)+")
_FORMS = (
    "give [auto] (every server on the graph), [auto:/prefix] (the servers under /prefix) "
    "or absolute namespaces like [/gpu0/lerobot, /gpu1/lerobot]"
)


@dataclass(frozen=True)
class FleetSpec:
    """What ``server_namespaces`` asks for: a fixed list, or discovery under ``prefix``."""

    listed: tuple[str, ...] = ()
    prefix: str | None = None  # None: no discovery; "/": every server; else the namespace prefix

    @property
    def discovers(self) -> bool:
        return self.prefix is not None

    def matches(self, namespace: str) -> bool:
        if self.prefix is None:
            return namespace in self.listed
        return (
            self.prefix == "/"
            or namespace == self.prefix
            or namespace.startswith(self.prefix + "/")
        )

    def describe(self) -> str:
        if self.prefix is None:
            return "[" + ", ".join(self.listed) + "]"
        return "[auto]" if self.prefix == "/" else f"[auto:{self.prefix}]"


def _prefix_of(entry: str) -> str | None:
    """The discovery prefix an ``auto`` entry asks for, or None when the entry is no ``auto``
    entry."""
    if entry == AUTO:
        return "/"
    if entry.startswith(AUTO + ":"):
        return entry[len(AUTO) + 1 :]
    return None


def fleet_problem(name: str, values: Sequence[str]) -> str | None:
    """Why ``values`` is no valid ``server_namespaces`` (None when it is); says what was
    expected."""
    autos = [value for value in values if _prefix_of(value) is not None]
    if autos:
        if len(values) > 1:
            return (
                f"'{name}' {list(values)}: {autos[0]!r} finds the replicas itself and cannot be "
                "combined "
                f"with other entries; {_FORMS}"
            )
        prefix = _prefix_of(autos[0])
        if prefix != "/" and not _NAMESPACE.fullmatch(prefix):
            return (
                f"'{name}' {autos[0]!r}: the prefix after 'auto:' must be an absolute namespace "
                "like "
                f"/fleet_a (letters, digits, underscores; no trailing slash), got {prefix!r}; "
                f"{_FORMS}"
            )
        return None
    relative = [value for value in values if not value.startswith("/")]
    if relative:
        return f"'{name}' has {relative}, expected absolute names like /lerobot_gpu0; {_FORMS}"
    return None


def fleet_spec(values: Sequence[str]) -> FleetSpec:
    """The spec of valid ``server_namespaces`` values (checked by ``fleet_problem`` first)."""
    if len(values) == 1 and (prefix := _prefix_of(values[0])) is not None:
        return FleetSpec(prefix=prefix)
    return FleetSpec(listed=tuple(values))


def heartbeat_namespace(topic: str, types: Sequence[str]) -> str | None:
    """The server namespace a heartbeat topic belongs to, or None when ``topic`` is no
    heartbeat."""
    if HEARTBEAT_TYPE not in types or not topic.endswith(_HEARTBEAT_SUFFIX):
        return None
    return topic[: -len(_HEARTBEAT_SUFFIX)] or None


def heartbeat_topics(graph: Iterable[tuple[str, Sequence[str]]], spec: FleetSpec) -> list[str]:
    """The topics of ``graph`` (every topic, with or without publishers) that may be a server of
    ``spec``: the only ones whose publishers are worth counting."""
    return [
        topic
        for topic, types in graph
        if (namespace := heartbeat_namespace(topic, types)) is not None and spec.matches(namespace)
    ]


def servers_in(snapshot: Iterable[tuple[str, Sequence[str]]], spec: FleetSpec) -> tuple[str, ...]:
    """The replicas of ``spec`` in ``snapshot`` (topics with a publisher), in name order."""
    return tuple(
        sorted(
            {
                namespace
                for topic, types in snapshot
                if (namespace := heartbeat_namespace(topic, types)) is not None
                and spec.matches(namespace)
            }
        )
    )


@dataclass(frozen=True)
class Change:
    """What one snapshot changed: replicas that appeared, and replicas that left (name order)."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


class ReplicaDiscovery:
    """The replicas found so far, updated by one graph snapshot at a time; not thread-safe (the
    link locks)."""

    def __init__(self, spec: FleetSpec, now_s: float = 0.0) -> None:
        if not spec.discovers:
            raise ValueError(
                "discovery needs server_namespaces [auto] or [auto:/prefix], got "
                f"{spec.describe()}"
            )
        self.spec = spec
        self.replicas: tuple[str, ...] = ()
        self.changed_at = now_s  # when the set last changed (or discovery began)

    def update(self, snapshot: Iterable[tuple[str, Sequence[str]]], now_s: float = 0.0) -> Change:
        found = servers_in(snapshot, self.spec)
        change = Change(
            tuple(n for n in found if n not in self.replicas),
            tuple(n for n in self.replicas if n not in found),
        )
        if change:
            self.replicas, self.changed_at = found, now_s
        return change

    def settled(self, now_s: float, quiet_s: float) -> bool:
        """At least one replica is known and none came or went for ``quiet_s``: a first placement
        may begin."""
        return bool(self.replicas) and now_s - self.changed_at >= quiet_s
