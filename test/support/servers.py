"""policy_server_node as a real process for tests: started, waited for (bounded), stopped by the
caller."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class ServerProcess:
    process: object
    log: Path
    audit: Path
    capture: Path
    http_port: int
    namespace: str = "/lerobot"

    def log_text(self) -> str:
        return self.log.read_text()


def start_server(
    checkpoint, directory: Path, ros_node, node_name: str = "lerobot", **parameters
) -> ServerProcess:
    """Start policy_server_node and wait until its services answer (bounded)."""
    return wait_for_server(spawn_server(checkpoint, directory, node_name, **parameters), ros_node)


def spawn_server(
    checkpoint, directory: Path, node_name: str = "lerobot", ros_namespace: str = "", **parameters
) -> ServerProcess:
    """Start policy_server_node without waiting (several start in parallel; then
    ``wait_for_server`` each).

    ``ros_namespace`` (e.g. /fleet): the node's ROS namespace, so its entities are under
    <ros_namespace>/<node_name>.
    """
    from lerobot_ros.processes import spawn_node

    server = ServerProcess(
        process=None,
        log=directory / f"{node_name}.log",
        audit=directory / f"{node_name}_audit.jsonl",
        capture=directory / f"{node_name}_capture",
        http_port=parameters.pop("http_port", 0),
        namespace=f"{ros_namespace.rstrip('/')}/{node_name}",
    )
    parameters = {
        "checkpoint": str(checkpoint),
        "audit_log": str(server.audit),
        "http_port": server.http_port,
        **parameters,
    }
    with server.log.open("w") as log:
        server.process = spawn_node(
            "lerobot_ros.server.node",
            parameters,
            log=log,
            node_name=node_name,
            namespace=ros_namespace,
        )
    return server


def wait_for_server(server: ServerProcess, ros_node, timeout_s: float = 180.0) -> ServerProcess:
    """Wait (bounded) until a spawned server's services answer; a server that exits or never
    answers fails the test."""
    from lerobot_ros.processes import stop
    from lerobot_ros.srv import GetStatus

    client = ros_node.create_client(GetStatus, f"{server.namespace}/get_status")
    deadline = time.monotonic() + timeout_s
    try:
        while not client.wait_for_service(timeout_sec=0.5):
            if server.process.poll() is not None or time.monotonic() > deadline:
                stop(server.process)
                pytest.fail(
                    "policy_server_node did not come up (exit "
                    f"{server.process.returncode}):\n{server.log_text()[-4000:]}"
                )
    finally:
        ros_node.destroy_client(client)
    return server


@contextmanager
def heartbeats_and_servers(ros_node, namespaces):
    """(heartbeats, servers): the latest ServerStatus of each of ``namespaces`` as it arrives, and
    a dict for the
    servers the test starts (any key -> ServerProcess); at the end the subscriptions go and every
    server still
    running is stopped, whatever the test did."""
    from lerobot_ros.msg import ServerStatus
    from lerobot_ros.processes import stop
    from lerobot_ros.protocol.qos import STATUS_QOS

    heartbeats: dict = {}
    servers: dict = {}
    subscriptions = [
        ros_node.create_subscription(
            ServerStatus,
            f"{namespace}/status",
            lambda msg, namespace=namespace: heartbeats.__setitem__(namespace, msg),
            STATUS_QOS,
        )
        for namespace in namespaces
    ]
    try:
        yield heartbeats, servers
    finally:
        for subscription in subscriptions:
            ros_node.destroy_subscription(subscription)
        for server in servers.values():
            if server.process.poll() is None:
                stop(server.process)
