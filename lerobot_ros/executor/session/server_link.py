"""The executor's end of the conversation with its policy server replicas: one session client each.

Implements ``worker.ServerLink``: the open request is built once from the executor's parameters;
status and session calls name their replica; every chunk goes to the core (which matches it against
its request in flight); an observation goes to the replica the latest session was opened on, as the
pending request made it (``PendingRequest.outgoing``: the core's task, JPEG quality, the policy's
camera sizes, the RTC prefix when RTC is on). Invariant: observations go only to the current
replica, and a hedged request to the standby's (``PendingRequest.replica``); a chunk of a replica
the robot moved away from still reaches the core, whose session and epoch checks drop it. In a
fleet the link also opens the warm standby (``open_standby``, for ``standby_keeper.py``) and
watches the serving and standby replicas on the graph (``watch_graph``). The old replica's data
plane is kept, not destroyed: destroying entities from the worker thread while the executor spins
them has crashed rclpy, and the old server closes the session after its ``session_idle_timeout_s``
without observations.

With ``server_namespaces: [auto]`` the replicas are discovered
(``discovery.py``): a thread of its own reads the graph every
``discovery_period_s`` (one ``get_topic_names_and_types`` and a publisher
count per heartbeat topic: bounded cost, nothing sent on the network); a
replica found gets its session client and heartbeat subscription at once;
one that left is no candidate of the next placement, but its entities are
kept (never destroyed while the node spins, as above) and reused if it
returns. A placement asks every candidate at once (``status_round.py``).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from lerobot_ros.executor.control.control_loop import ControlLoop
from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.fleet.discovery import Change, ReplicaDiscovery, heartbeat_topics
from lerobot_ros.executor.fleet.status_round import ask_all
from lerobot_ros.executor.requests.pending_request import PendingRequest
from lerobot_ros.executor.session.handshake_types import ServerView, SessionGrant
from lerobot_ros.executor.session.session_client import SessionClient
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.msg import Observation, ServerStatus
from lerobot_ros.protocol import names
from lerobot_ros.protocol.contract import OpenRequest
from lerobot_ros.protocol.qos import STATUS_QOS
from lerobot_ros.protocol.wire.data_plane import observation_to_msg
from lerobot_ros.protocol.wire.images import ImageError

#: How often the start-up discovery wait looks at the graph (seconds).
DISCOVERY_POLL_S = 0.05
#: Discovering: the first placement begins once some replica is known and the set did not change
#: for this long.
DISCOVERY_QUIET_S = 0.5
DISCOVERY_JOIN_TIMEOUT_S = 2.0
#: Bound of closing a standby no longer wanted (seconds): its server collects it anyway once we are
#: gone.
CLOSE_STANDBY_TIMEOUT_S = 1.0


class RosServerLink:
    def __init__(self, node: Node, settings: ExecutorSettings, core: ExecutorCore) -> None:
        self.node, self.settings, self.core = node, settings, core
        self.stopping = threading.Event()  # one for all clients: a shutdown ends every wait
        # Their own callback group: a response must be handled even while a
        # service callback of the node (awaiting one of these calls) is running.
        self._group = MutuallyExclusiveCallbackGroup()
        self._lock = threading.Lock()  # clients, heartbeat subscriptions, the replica list
        self._clients: dict[str, SessionClient] = {}
        self._heartbeats: dict[str, object] = {}
        self._on_heartbeat: Callable[[str, ServerStatus], None] | None = None
        self._spinning = False
        self.discovers = settings.fleet.discovers
        self._discovery = (
            ReplicaDiscovery(settings.fleet, time.monotonic()) if self.discovers else None
        )
        self._add(settings.replicas)
        self._namespaces: tuple[str, ...] = settings.replicas  # discovering: () until refreshed
        self._current = settings.replicas[0] if settings.replicas else ""
        self._open_request = OpenRequest(
            client_id=settings.client_id,
            schema_version=Observation.CURRENT_SCHEMA_VERSION,
            action_names=settings.mapping.policy_names,
            state_dim=settings.state_dim,
            camera_names=settings.camera_names,
            fps=settings.fps,
            task=settings.task,
            rtc_requested=settings.rtc_requested,
        )
        # A standby's open request: the same declaration, marked as a standby (the server runs
        # nothing for it).
        self._standby_request = dataclasses.replace(self._open_request, standby=True)
        self._graph_poll: ControlLoop | None = None
        self._keeper = None  # standby_keeper.StandbyKeeper, in a fleet with standby_session
        self._rebalancer = None  # rebalancing.Rebalancer, in a fleet with rebalance_period_s > 0
        self._graph_seen: dict[
            str, bool
        ] = {}  # replica -> its heartbeat publisher was on the graph last look
        self._poll: ControlLoop | None = None
        if self.discovers:
            self.refresh()
            self._poll = ControlLoop(
                1.0 / settings.discovery_period_s,
                lambda now_s: self.refresh(),
                self._on_poll_error,
                name="lerobot_ros_discovery",
            )
            self._poll.start()

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The replicas a placement may use now: the configured ones, or those discovery knows."""
        with self._lock:
            return self._namespaces

    # ------------------------------------------------------------ discovery

    def refresh(self) -> Change:
        """Read the graph once (discovering only): replicas found get their entities, the list is
        replaced."""
        if self._discovery is None or self.stopping.is_set():
            return Change()
        node = self.node
        graph = node.get_topic_names_and_types()
        heartbeats = set(heartbeat_topics(graph, self._discovery.spec))
        # A heartbeat topic counts only with a publisher: subscribers (ours among them) keep a
        # topic listed.
        snapshot = [
            (topic, types)
            for topic, types in graph
            if topic in heartbeats and node.count_publishers(topic)
        ]
        with self._lock:
            change = self._discovery.update(snapshot, time.monotonic())
            if not change:
                return change
            self._add(change.added)
            self._namespaces = namespaces = self._discovery.replicas
        self.core.replicas_found(namespaces)
        for namespace in change.added:
            node.get_logger().info(
                f"replica {namespace} found on the graph: a placement candidate from now on"
            )
        for namespace in change.removed:
            node.get_logger().info(
                f"replica {namespace} left the graph: no longer a placement candidate"
            )
        return change

    def _add(self, namespaces) -> None:
        """Entities for new replicas (under the lock, or before any other thread exists)."""
        for namespace in namespaces:
            if namespace not in self._clients:
                client = SessionClient(
                    self.node,
                    namespace,
                    self.settings.client_id,
                    sink=self.core,
                    callback_group=self._group,
                )
                client.stopping, client.spinning = self.stopping, self._spinning
                self._clients[namespace] = client
            self._subscribe_heartbeat(namespace)

    def _subscribe_heartbeat(self, namespace: str) -> None:
        if self._on_heartbeat is None or namespace in self._heartbeats:
            return
        callback = self._on_heartbeat
        self._heartbeats[namespace] = self.node.create_subscription(
            ServerStatus,
            names.in_namespace(namespace, names.STATUS),
            lambda msg, namespace=namespace: callback(namespace, msg),
            STATUS_QOS,
        )

    def watch_heartbeats(self, on_heartbeat: Callable[[str, ServerStatus], None]) -> None:
        """Subscribe every replica's heartbeat (``<replica>/status``), and each discovered one's
        from now on."""
        with self._lock:
            self._on_heartbeat = on_heartbeat
            for namespace in self._clients:
                self._subscribe_heartbeat(namespace)

    def _on_poll_error(self, error: BaseException) -> None:
        self.node.get_logger().error(
            f"replica discovery failed: {type(error).__name__}: {error}", throttle_duration_sec=5.0
        )

    def stop_discovery(self) -> None:
        """End the graph polls, discovery's and the graph watch (before the node's entities go);
        idempotent."""
        for poll in (self._poll, self._graph_poll):
            if poll is not None:
                poll.stop()
                if poll is not threading.current_thread():
                    poll.join(timeout=DISCOVERY_JOIN_TIMEOUT_S)
        self._poll = self._graph_poll = None

    @property
    def session(self) -> SessionClient:
        """The client of the replica serving the robot now (reset, close): the latest session
        opened, or the
        standby promoted since (a failover or rebalancing move opens no session through this
        link)."""
        return self._clients[self.core.identity.replica or self._current]

    def destroy(self) -> None:
        """Destroy every replica client's entities and heartbeat subscriptions (cleanup); ends
        waits and polls first."""
        self.stopping.set()
        self.stop_discovery()
        with self._lock:
            clients, subscriptions = list(self._clients.values()), list(self._heartbeats.values())
            self._heartbeats.clear()
            self._on_heartbeat = None
        for subscription in subscriptions:
            self.node.destroy_subscription(subscription)
        for client in clients:
            client.destroy()

    def mark_spinning(self) -> None:
        """An executor spins the node from now on: calls only wait for their futures."""
        with self._lock:
            self._spinning = True
            for client in self._clients.values():
                client.spinning = True

    def get_status(self, namespace: str, timeout_s: float) -> ServerView | str:
        return self._clients[namespace].get_status(timeout_s)

    def get_statuses(self, namespaces, timeout_s: float) -> list[tuple[str, ServerView | str]]:
        """All at once (``status_round``); while nothing spins the node, this thread spins it for
        the round."""
        if len(namespaces) <= 1:  # one call: it spins the node itself when it must
            return [(namespace, self.get_status(namespace, timeout_s)) for namespace in namespaces]
        with self._lock:
            clients, pumped = dict(self._clients), not self._spinning
        pump = (lambda wait_s: rclpy.spin_once(self.node, timeout_sec=wait_s)) if pumped else None
        return ask_all(
            lambda namespace: clients[namespace].get_status(timeout_s, wait_only=pumped),
            namespaces,
            timeout_s,
            pump=pump,
        )

    def wait_for_discovery(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.stopping.is_set() and time.monotonic() < deadline:
            if self._discovery is not None:
                self.refresh()
            with self._lock:
                clients = [self._clients[namespace] for namespace in self._namespaces]
                settled = self._discovery is None or self._discovery.settled(
                    time.monotonic(), DISCOVERY_QUIET_S
                )
            if settled and all(client.discovered() for client in clients):
                return
            time.sleep(DISCOVERY_POLL_S)

    def open_session(
        self, namespace: str, timeout_s: float, check: Callable[[SessionGrant], str | None]
    ) -> SessionGrant | str:
        grant = self._clients[namespace].open_session(self._open_request, timeout_s, check)
        if isinstance(grant, SessionGrant):
            self._current = namespace
        return grant

    def open_standby(
        self, namespace: str, timeout_s: float, check: Callable[[SessionGrant], str | None]
    ) -> SessionGrant | str:
        """A warm standby session there (``standby_keeper.py``), its data plane matched; the
        serving replica
        stays the current one."""
        with self._lock:
            client = self._clients.get(namespace)
        if client is None:
            return f"replica {namespace} is not known"
        return client.open_session(self._standby_request, timeout_s, check)

    def close_session_at(self, namespace: str, session_id: str) -> None:
        """Close a session that does not serve the robot (a standby no longer wanted, the session a
        move left), bounded and best effort: its server collects it otherwise. Called from the
        worker and keeper threads, so the replica's data plane is kept (never destroyed under the
        spinning executor)."""
        with self._lock:
            client = self._clients.get(namespace)
        if client is not None:
            client.close_session(session_id, CLOSE_STANDBY_TIMEOUT_S, keep_data_plane=True)

    def send_observation(self, pending: PendingRequest) -> str | None:
        """Publish ``pending`` on its session's replica (the serving one, or the standby's for a
        hedge)."""
        try:
            msg = observation_to_msg(pending.outgoing())
        except ImageError as error:
            return f"camera frame unusable: {error}"
        with self._lock:
            client = self._clients.get(pending.replica) if pending.replica else None
        (client or self.session).send_observation(msg)
        return None

    def keep_fleet(self, robot, log: Callable[[str], None]) -> None:
        """In a fleet: arm and keep a warm standby (``standby_keeper.py``) and watch the replicas
        on the graph
        (``standby_session``), and rebalance (``rebalancing.py``, ``rebalance_period_s`` > 0)."""
        from lerobot_ros.executor.fleet.rebalancing import Rebalancer
        from lerobot_ros.executor.fleet.standby_keeper import StandbyKeeper

        settings = self.settings
        if settings.keeps_standby and self._keeper is None:
            self._keeper = StandbyKeeper(self.core, self, robot, log=log)
            self._keeper.start()
            self.watch_graph()
        if settings.is_fleet and settings.rebalance_period_s > 0 and self._rebalancer is None:
            self._rebalancer = Rebalancer(self.core, self, robot, log=log)
            self._rebalancer.start()

    def stop_fleet_threads(self) -> None:
        """Stop the standby keeper and the rebalancer (each ends a call under way within its
        bound)."""
        threads, self._keeper, self._rebalancer = (self._keeper, self._rebalancer), None, None
        for thread in threads:
            if thread is not None:
                thread.stop()
        for thread in threads:
            if thread is not None and thread is not threading.current_thread():
                thread.join(timeout=DISCOVERY_JOIN_TIMEOUT_S + CLOSE_STANDBY_TIMEOUT_S)

    def end_standby(self) -> None:
        """The session is being closed: close the standby too (``core.end_standby``), bounded."""
        standby = self.core.end_standby()
        if standby is not None:
            self.close_session_at(*standby)

    # ----------------------------------------------------------- graph watch

    def watch_graph(self) -> None:
        """Look for the serving and standby replicas' heartbeat publishers every
        ``graph_watch_period_s``; one that was there and is gone is a lost replica
        (``core.replica_left_graph``) at once."""
        if not self.settings.is_fleet or self._graph_poll is not None:
            return
        self._graph_poll = ControlLoop(
            1.0 / self.settings.graph_watch_period_s,
            self._look_at_graph,
            self._on_poll_error,
            name="lerobot_ros_graph_watch",
        )
        self._graph_poll.start()

    def _look_at_graph(self, now_s: float) -> None:
        if self.stopping.is_set():
            return
        standby = self.core.standby
        watched = {self.core.identity.replica, standby.replica if standby is not None else ""} - {
            ""
        }
        for replica in watched:
            present = self.node.count_publishers(names.in_namespace(replica, names.STATUS)) > 0
            if self._graph_seen.get(replica) and not present:
                self.node.get_logger().warning(
                    f"replica {replica}: its heartbeat publisher left the ROS graph"
                )
                self.core.replica_left_graph(replica, time.monotonic())
            self._graph_seen[replica] = present
