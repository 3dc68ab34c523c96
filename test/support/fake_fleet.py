"""A fleet of fake replicas /a, /b, /c of one model, for the executor's failover and rebalancing in
plain Python: the product's own core, worker, standby keeper and rebalancer run against it; only
the servers are fake (each answers at once, late, or never)."""

from __future__ import annotations

import threading

import numpy as np

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.fleet.status_round import ask_all
from lerobot_ros.executor.requests.network_worker import NetworkWorker
from lerobot_ros.executor.session.handshake import handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView, SessionGrant
from support.executor_harness import CAMERA, CAPABILITIES, JOINTS, Clock, chunk, feed, settings

ROBOT = RobotDeclaration(JOINTS, (CAMERA,), 3)


class HedgeFleet:
    """Replicas /a, /b, /c of one model; each answers at once (``latency_s`` as the round trip),
    after a real
    delay (``after``), or never (``silent``: killed)."""

    discovers = False

    def __init__(self, core, latency_s=0.02) -> None:
        self.core, self.latency_s = core, latency_s
        self.namespaces = ("/a", "/b", "/c")
        self.load = {"/a": 0, "/b": 2, "/c": 1}
        self.silent: set[str] = set()
        self.after: dict[str, float] = {}
        self.opened: list[tuple[str, bool]] = []  # (replica, as a standby)
        self.sent: list[tuple[str, str]] = []  # (replica, session id)
        self.closed: list[tuple[str, str]] = []
        self.status_rounds = 0
        self.sessions = 0
        self.view_fields: dict[
            str, dict
        ] = {}  # namespace -> more ServerView fields (standbys, headroom, ...)

    def get_status(self, namespace, timeout_s):
        if namespace in self.silent:
            return f"no policy server answered on {namespace} within {timeout_s:g} s"
        return ServerView(
            True,
            f"i{namespace}",
            CAPABILITIES,
            active_sessions=self.load[namespace],
            max_sessions=4,
            **self.view_fields.get(namespace, {}),
        )

    def get_statuses(self, namespaces, timeout_s):
        self.status_rounds += 1
        return ask_all(
            lambda namespace: self.get_status(namespace, timeout_s), namespaces, timeout_s
        )

    def wait_for_discovery(self, timeout_s):
        pass

    def _grant(self, namespace, standby, check):
        self.sessions += 1
        grant = SessionGrant(
            f"s{self.sessions}{namespace.strip('/')}", False, "/obs", "/chunk", CAPABILITIES
        )
        problem = check(grant)
        if problem:
            return problem
        self.opened.append((namespace, standby))
        return grant

    def open_session(self, namespace, timeout_s, check):
        return self._grant(namespace, False, check)

    def open_standby(self, namespace, timeout_s, check):
        return self._grant(namespace, True, check)

    def close_session_at(self, namespace, session_id):
        self.closed.append((namespace, session_id))

    def send_observation(self, pending):
        replica = pending.replica
        self.sent.append((replica, pending.request.session_id))
        if replica in self.silent:
            return None
        actions = np.tile(np.arange(10, dtype=np.float32)[:, None], (1, 3))
        reply = chunk(pending.request, actions=actions)
        received = pending.request.sent_monotonic_ns + round(self.latency_s * 1e9)
        if replica in self.after:
            threading.Timer(
                self.after[replica], self.core.offer_chunk, args=(reply, received)
            ).start()
        else:
            self.core.offer_chunk(reply, received)
        return None


def fleet(latency_s=0.02, **overrides):
    clock = Clock()
    made = settings(
        server_namespaces=["/a", "/b", "/c"],
        fps=10.0,
        buffer_time_s=0.25,
        request_timeout_s=1.0,
        hedge_min_deadline_s=0.1,
        hedge_deadline_factor=2.0,
        **overrides,
    )
    core = ExecutorCore(made, clock())
    link = HedgeFleet(core, latency_s)
    assert handshake(core, link, ROBOT, clock).accepted and core.identity.replica == "/a"
    return clock, core, link, NetworkWorker(core, link, ROBOT, clock=clock, clock_ns=clock.ns)


def serve(core, worker, clock, times=1):
    """``times`` requests, each from an empty queue, answered and merged."""
    for _ in range(times):
        feed(core, clock)
        core.clear_queue()
        assert worker.step()
