"""policy_server_node: serve one pre-warmed LeRobot policy over ROS 2.

ROS entities (all under the node's name, default /lerobot):
  ~/get_status  lerobot_ros/srv/GetStatus  what is served, and the load
  ~/status      lerobot_ros/msg/ServerStatus  heartbeat every heartbeat_period_s

Start-up order is load -> warm up -> advertise: the services and the
heartbeat appear only once the model can answer at full speed.
"""

from __future__ import annotations

import re
import sys
import time
import uuid

from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy

from lerobot_ros import wire
from lerobot_ros.msg import ServerStatus
from lerobot_ros.node_support import NodeStartupError, ParameterSpec, declare_parameters, declared_strings, run_node
from lerobot_ros.server.policy_families import DTYPES
from lerobot_ros.srv import GetStatus
from lerobot_ros.telemetry import ServerHealth

NODE_NAME = "lerobot"

PARAMETERS = (
    ParameterSpec("checkpoint", "", "LeRobot checkpoint: a local directory or a Hugging Face Hub id (required)"),
    ParameterSpec("revision", "", "Hub revision (branch, tag or commit) of the checkpoint; empty for the default"),
    ParameterSpec("device", "auto", "Torch device: auto (cuda when available, else cpu), cpu, cuda, cuda:N"),
    ParameterSpec("dtype", "float32", "Model dtype: float32, float16 or bfloat16"),
    ParameterSpec(
        "action_names",
        [""],
        "Ordered action names the policy outputs; empty to read them from the checkpoint's lerobot_ros.json",
    ),
    ParameterSpec("trained_fps", 0.0, "Control rate the policy was trained at (Hz); 0 to read it from lerobot_ros.json"),
    ParameterSpec("warmup_inferences", 2, "Full predict passes run before the server advertises itself"),
    ParameterSpec("heartbeat_period_s", 0.5, "Period of the ~/status heartbeat (seconds)"),
)

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")

# Heartbeats are small and periodic: keep only the newest, but deliver it.
STATUS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)


def parameter_problems(params: dict) -> list[str]:
    """What is wrong with the parameters, checked before seconds of loading."""
    problems = []
    if not params["checkpoint"]:
        problems.append("'checkpoint' is empty: give a checkpoint directory or Hub id")
    if params["dtype"] not in DTYPES:
        problems.append(f"'dtype' is {params['dtype']!r}, expected one of {list(DTYPES)}")
    if not _DEVICE.match(params["device"]):
        problems.append(f"'device' is {params['device']!r}, expected auto, cpu, mps, cuda or cuda:N")
    if params["warmup_inferences"] < 0:
        problems.append(f"'warmup_inferences' is {params['warmup_inferences']}, expected 0 or more")
    if params["heartbeat_period_s"] <= 0:
        problems.append(f"'heartbeat_period_s' is {params['heartbeat_period_s']}, expected more than 0")
    return problems


class PolicyServerNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.params = declare_parameters(self, PARAMETERS)
        problems = parameter_problems(self.params)
        if problems:
            raise NodeStartupError("invalid parameters: " + "; ".join(problems))
        self.instance_id = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self.heartbeat_seq = 0

        self.loaded = self._load()
        self.capabilities_msg = wire.capabilities_to_msg(self.loaded.capabilities)
        self._warm_up()

        self.status_pub = self.create_publisher(ServerStatus, "~/status", STATUS_QOS)
        self.create_service(GetStatus, "~/get_status", self.on_get_status)
        self.create_timer(self.params["heartbeat_period_s"], self.on_heartbeat)
        self.get_logger().info(
            f"ready: serving {self.loaded.capabilities.policy_type} "
            f"(fingerprint {self.loaded.capabilities.model_fingerprint}) at {self.get_fully_qualified_name()}"
        )

    def _load(self):
        # torch and LeRobot take seconds to import: import them here, after
        # rclpy.init, so Ctrl-C during start-up ends the node cleanly.
        from lerobot_ros.server.checkpoint import CheckpointError, load_policy
        from lerobot_ros.server.policy_families import UnsupportedPolicyError

        checkpoint = self.params["checkpoint"]
        action_names = list(declared_strings(self.params["action_names"]))
        self.get_logger().info(f"loading {checkpoint} on {self.params['device']} as {self.params['dtype']}")
        started = time.monotonic()
        try:
            loaded = load_policy(
                checkpoint,
                revision=self.params["revision"],
                device=self.params["device"],
                dtype=self.params["dtype"],
                action_names=action_names or None,
                trained_fps=self.params["trained_fps"],
            )
        except (CheckpointError, UnsupportedPolicyError) as error:
            raise NodeStartupError(str(error)) from error
        self.get_logger().info(f"loaded in {time.monotonic() - started:.1f} s")
        return loaded

    def _warm_up(self) -> None:
        from lerobot_ros.server.warmup import warm_up

        count = self.params["warmup_inferences"]
        self.get_logger().info(f"warming up ({count} inferences)")
        durations = warm_up(self.loaded, count)
        if durations:
            self.get_logger().info(
                "warm-up done: " + ", ".join(f"{seconds * 1000:.0f} ms" for seconds in durations)
            )

    def health(self) -> ServerHealth:
        return ServerHealth(
            instance_id=self.instance_id,
            server_namespace=self.get_fully_qualified_name(),
            heartbeat_seq=self.heartbeat_seq,
            ready=True,
            draining=False,
            uptime_s=time.monotonic() - self.started,
        )

    def status_msg(self) -> ServerStatus:
        return wire.server_status_to_msg(self.health(), self.capabilities_msg, self.get_clock().now().to_msg())

    def on_heartbeat(self) -> None:
        self.heartbeat_seq += 1
        self.status_pub.publish(self.status_msg())

    def on_get_status(self, request: GetStatus.Request, response: GetStatus.Response) -> GetStatus.Response:
        response.status = self.status_msg()
        return response


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(PolicyServerNode, args))


if __name__ == "__main__":
    main()
