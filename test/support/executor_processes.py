"""chunk_executor_node and the stand-in robot driver as real processes, for tests.

``Robot`` runs lerobot_ros/standins/robot_io.py (shuffled joint states, a camera,
and a recorder of every command it receives: the hardware boundary);
``Executor`` runs chunk_executor_node and collects its ``~/status`` in the
test process. The ``launched`` fixture (conftest.py) starts both and stops
whatever was started.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from lerobot_ros.msg import ExecutorStatus
from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.protocol.qos import STATUS_QOS
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.standins.robot_io import POSITIONS
from support.jsonl import read_jsonl
from support.ros import spin_until

EXECUTOR = "lerobot_ros.executor.node"


class Robot:
    """robot_io.py running under ``prefix``; commands recorded as JSON lines."""

    def __init__(
        self, directory: Path, prefix: str, transport: str = "compressed", commands=()
    ) -> None:
        self.prefix, self.out = prefix, directory / f"{prefix.strip('/')}_commands.jsonl"
        args = [
            sys.executable,
            "-m",
            "lerobot_ros.standins.robot_io",
            "--prefix",
            prefix,
            "--out",
            str(self.out),
            "--transport",
            transport,
            "--run-s",
            "240",
        ]
        for mode, topic in commands:
            args += ["--command", f"{mode}:{topic}"]
        self.out.touch()
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)

    def commands(self, topic: str | None = None) -> list[dict]:
        lines = read_jsonl(self.out)
        return [line for line in lines if topic is None or line["topic"] == topic]

    def executor_parameters(self, server_namespace: str = "/lerobot", **overrides) -> dict:
        return {
            "server_namespace": server_namespace,
            "client_id": self.prefix.strip("/"),
            "joint_names": list(SO101_JOINT_NAMES),
            "camera_names": [FRONT_CAMERA],
            "camera_topics": [f"{self.prefix}/camera"],
            "camera_transports": ["compressed"],
            "state_topic": f"{self.prefix}/joint_states",
            "output_topic": f"{self.prefix}/commands",
            "handshake_timeout_s": 10.0,
            "status_period_s": 0.1,
            **overrides,
        }

    def stop(self) -> None:
        stop(self.process, timeout_s=5)


class Executor:
    """One chunk_executor_node process and its ~/status stream, read in the test process."""

    def __init__(self, ros_node, directory: Path, name: str, parameters: dict) -> None:
        self.node, self.name = ros_node, name
        self.log = directory / f"{name}.log"
        with self.log.open("w") as log:
            self.process = spawn_node(EXECUTOR, parameters, log=log, node_name=name)
        self.statuses: list[ExecutorStatus] = []
        self.subscription = ros_node.create_subscription(
            ExecutorStatus, f"/{name}/status", self._on_status, STATUS_QOS
        )

    def _on_status(self, msg: ExecutorStatus) -> None:
        self.statuses.append((time.monotonic(), msg))

    @property
    def status(self) -> ExecutorStatus | None:
        return self.statuses[-1][1] if self.statuses else None

    def wait(self, predicate, timeout_s: float, what: str) -> ExecutorStatus:
        ok = spin_until(
            self.node, lambda: self.status is not None and predicate(self.status), timeout_s
        )
        assert ok, (
            f"{self.name}: {what} not reached within {timeout_s} s; last status "
            f"{self._describe()}\n{self.log_text()}"
        )
        return self.status

    def spin(self, seconds: float) -> None:
        spin_until(self.node, lambda: False, seconds)

    def states_since(self, since: float) -> set[str]:
        return {msg.state_name for at, msg in self.statuses if at >= since}

    def _describe(self) -> str:
        status = self.status
        if status is None:
            return "(none)"
        return (
            f"{status.state_name} ({status.reason}) merged={status.chunks_merged} "
            f"epoch={status.epoch}"
        )

    def log_text(self) -> str:
        return self.log.read_text()[-3000:]

    def stop(self) -> int:
        self.node.destroy_subscription(self.subscription)
        return stop(self.process, timeout_s=10)


def trigger(ros_node, service: str):
    from std_srvs.srv import Trigger

    client = ros_node.create_client(Trigger, service)
    try:
        assert client.wait_for_service(timeout_sec=10), f"{service} not available"
        future = client.call_async(Trigger.Request())
        assert spin_until(ros_node, future.done, 10), f"{service} did not answer"
        return future.result()
    finally:
        ros_node.destroy_client(client)


def is_hold(values) -> bool:
    return values == pytest.approx(list(POSITIONS), abs=1e-6)
