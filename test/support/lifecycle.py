"""A node's standard ROS services from the test process: lifecycle transitions and parameter sets
(bounded)."""

from __future__ import annotations

import time

from lifecycle_msgs.srv import ChangeState, GetState
from rcl_interfaces.srv import SetParameters
from rclpy.parameter import Parameter

from support.robot_client import call
from support.ros import spin_until

#: A query asked again after this long unanswered: a reply sent before the node matched this
#: client's reply reader is lost (seen in CI right after a node started), and GetState changes
#: nothing.
QUERY_RETRY_S = 5.0


def lifecycle_state(ros_node, node_name: str, timeout_s: float = 60.0) -> str:
    """The node's current lifecycle state label (unconfigured, inactive, active, finalized)."""
    client = ros_node.create_client(GetState, f"{node_name}/get_state")
    try:
        assert client.wait_for_service(timeout_sec=timeout_s), f"{client.srv_name} not available"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            future = client.call_async(GetState.Request())
            if spin_until(
                ros_node, future.done, min(QUERY_RETRY_S, max(0.0, deadline - time.monotonic()))
            ):
                return future.result().current_state.label
            client.remove_pending_request(future)
        raise AssertionError(f"{client.srv_name} did not answer within {timeout_s} s")
    finally:
        ros_node.destroy_client(client)


def change_state(ros_node, node_name: str, transition: str, timeout_s: float = 120.0) -> bool:
    """Ask for a transition by label (configure, activate, ...); whether it succeeded."""
    client = ros_node.create_client(ChangeState, f"{node_name}/change_state")
    request = ChangeState.Request()
    request.transition.label = transition
    try:
        return call(ros_node, client, request, timeout_s).success
    finally:
        ros_node.destroy_client(client)


def set_parameters(ros_node, node_name: str, **values) -> list:
    """``ros2 param set`` for each value, one SetParametersResult each, in order."""
    client = ros_node.create_client(SetParameters, f"{node_name}/set_parameters")
    request = SetParameters.Request(
        parameters=[
            Parameter(name, value=value).to_parameter_msg() for name, value in values.items()
        ]
    )
    try:
        return list(call(ros_node, client, request).results)
    finally:
        ros_node.destroy_client(client)
