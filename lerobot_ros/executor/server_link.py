"""The executor's end of the conversation with its policy server replicas: one session client each.

Implements ``worker.ServerLink``: the open request is built once from the
executor's parameters; status and session calls name their replica; every
chunk goes to the core (which matches it against its request in flight);
an observation goes to the replica the latest session was opened on, as
the pending request made it (``PendingRequest.outgoing``: the core's task,
JPEG quality, the policy's camera sizes, the RTC prefix when RTC is on). Invariant: observations go only to the current replica; a chunk of a
replica the robot moved away from still reaches the core, whose session and
epoch checks drop it. The old replica's data plane is kept, not destroyed:
destroying entities from the worker thread while the executor spins them has
crashed rclpy, and the old server closes the session after its
``session_idle_timeout_s`` without observations.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node

from lerobot_ros.contract import OpenRequest
from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.handshake_types import ServerView, SessionGrant
from lerobot_ros.executor.pending_request import PendingRequest
from lerobot_ros.executor.settings import ExecutorSettings
from lerobot_ros.wire.data_plane import observation_to_msg
from lerobot_ros.wire.images import ImageError
from lerobot_ros.msg import Observation
from lerobot_ros.executor.session_client import SessionClient

#: How often the start-up discovery wait looks at the graph (seconds).
DISCOVERY_POLL_S = 0.05


class RosServerLink:
    def __init__(self, node: Node, settings: ExecutorSettings, core: ExecutorCore) -> None:
        self.settings = settings
        self.namespaces = settings.replicas
        self.stopping = threading.Event()  # one for all clients: a shutdown ends every wait
        # Their own callback group: a response must be handled even while a
        # service callback of the node (awaiting one of these calls) is running.
        group = MutuallyExclusiveCallbackGroup()
        self._clients = {namespace: SessionClient(node, namespace, settings.client_id, sink=core, callback_group=group)
                         for namespace in self.namespaces}
        for client in self._clients.values():
            client.stopping = self.stopping
        self._current = self.namespaces[0]
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

    @property
    def session(self) -> SessionClient:
        """The client of the replica the latest session was opened on (reset, close)."""
        return self._clients[self._current]

    def destroy(self) -> None:
        """Destroy every replica client's entities (cleanup); ends their waits first."""
        self.stopping.set()
        for client in self._clients.values():
            client.destroy()

    def mark_spinning(self) -> None:
        """An executor spins the node from now on: calls only wait for their futures."""
        for client in self._clients.values():
            client.spinning = True

    def get_status(self, namespace: str, timeout_s: float) -> ServerView | str:
        return self._clients[namespace].get_status(timeout_s)

    def wait_for_discovery(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.stopping.is_set() and time.monotonic() < deadline:
            if all(client.discovered() for client in self._clients.values()):
                return
            time.sleep(DISCOVERY_POLL_S)

    def open_session(self, namespace: str, timeout_s: float,
                     check: Callable[[SessionGrant], str | None]) -> SessionGrant | str:
        grant = self._clients[namespace].open_session(self._open_request, timeout_s, check)
        if isinstance(grant, SessionGrant):
            self._current = namespace
        return grant

    def send_observation(self, pending: PendingRequest) -> str | None:
        try:
            msg = observation_to_msg(pending.outgoing())
        except ImageError as error:
            return f"camera frame unusable: {error}"
        self.session.send_observation(msg)
        return None
