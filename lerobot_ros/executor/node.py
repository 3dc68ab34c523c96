"""chunk_executor_node: the robot-side end of lerobot_ros (no torch, no LeRobot).

This version performs the start-up handshake: it finds the policy server,
reads what it serves (<server_namespace>/get_status) and checks this robot's
ordered joint names, cameras and state dimension against the policy. It
prints the outcome as one JSON line on stdout and exits 0 when accepted, 1
with the reason when refused or when no server answered. Streaming action
chunks to hardware builds on this handshake.

ROS entities:
  <server_namespace>/get_status  lerobot_ros/srv/GetStatus  (client)
"""

from __future__ import annotations

import json
import sys

import rclpy
from rclpy.node import Node

from lerobot_ros import wire
from lerobot_ros.executor.handshake import HandshakeResult, RobotDeclaration, evaluate
from lerobot_ros.node_support import NodeStartupError, ParameterSpec, declare_parameters, declared_strings
from lerobot_ros.srv import GetStatus

NODE_NAME = "chunk_executor"

PARAMETERS = (
    ParameterSpec("server_namespace", "/lerobot", "Namespace of the policy server's services, e.g. /lerobot"),
    ParameterSpec("joint_names", [""], "Ordered joint (= action) names of this robot; must equal the policy's"),
    ParameterSpec("camera_names", [""], "Camera feature names this robot provides; empty: not checked"),
    ParameterSpec("state_dim", 0, "Length of the state vector this robot sends; 0: not checked"),
    ParameterSpec("handshake_timeout_s", 30.0, "How long to wait for the server to answer at start-up (seconds)"),
)


class ChunkExecutorNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.params = declare_parameters(self, PARAMETERS)
        joint_names = declared_strings(self.params["joint_names"])
        if not joint_names:
            raise NodeStartupError("parameter 'joint_names' is empty: list the robot's ordered joint names")
        self.robot = RobotDeclaration(
            joint_names=joint_names,
            camera_names=declared_strings(self.params["camera_names"]),
            state_dim=self.params["state_dim"],
        )
        service = self.params["server_namespace"].rstrip("/") + "/get_status"
        self.get_status = self.create_client(GetStatus, service)

    def handshake(self) -> HandshakeResult:
        timeout = self.params["handshake_timeout_s"]
        service = self.get_status.srv_name
        if not self.get_status.wait_for_service(timeout_sec=timeout):
            return HandshakeResult(False, f"no policy server answered on {service} within {timeout:.0f} s")
        future = self.get_status.call_async(GetStatus.Request())
        rclpy.spin_until_future_complete(self, future, timeout_sec=timeout)
        if not future.done() or future.result() is None:
            return HandshakeResult(False, f"{service} did not reply within {timeout:.0f} s")
        status = future.result().status
        capabilities = wire.capabilities_from_msg(status.capabilities)
        return evaluate(self.robot, capabilities, status.ready, status.instance_id)


def main(args: list[str] | None = None) -> None:
    rclpy.init(args=args if args is not None else sys.argv)
    node = None
    try:
        node = ChunkExecutorNode()
        result = node.handshake()
    except NodeStartupError as error:
        result = HandshakeResult(False, str(error))
    except KeyboardInterrupt:
        result = HandshakeResult(False, "interrupted")
    finally:
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    print(json.dumps(result.as_dict()), flush=True)
    if not result.accepted:
        print(f"error: handshake refused: {result.reason}", file=sys.stderr, flush=True)
    sys.exit(0 if result.accepted else 1)


if __name__ == "__main__":
    main()
