"""policy_server_node as a managed node, driven through its real lifecycle and parameter services.

One server process started with ``autostart:=false`` goes through every
transition while a robot in the test process talks to it: a bad checkpoint
fails configure and leaves it unconfigured, a good one configures it,
activate serves, deactivate in the middle of a request answers that request
and refuses new sessions naming the state, activate serves again, runtime
parameters are accepted or refused with the reason, cleanup and shutdown
release it, and SIGINT still ends it cleanly.
"""

from __future__ import annotations

from lerobot_ros.msg import ServerStatus
from lerobot_ros.processes import stop
from lerobot_ros.protocol.wire.data_plane import chunk_from_msg
from lerobot_ros.srv import GetStatus
from support.lifecycle import change_state, lifecycle_state, set_parameters
from support.robot_client import RobotClient, call
from support.ros import spin_until
from support.servers import spawn_server

NODE = "/managed_server"
#: Every inference takes this much longer, so a request is surely in flight when deactivate
#: arrives.
INFERENCE_DELAY_S = 1.0


def status_of(ros_node) -> ServerStatus:
    client = ros_node.create_client(GetStatus, f"{NODE}/get_status")
    try:
        return call(ros_node, client, GetStatus.Request()).status
    finally:
        ros_node.destroy_client(client)


def test_every_transition_through_the_lifecycle_services(act_checkpoint, tmp_path, ros_node):
    server = spawn_server(
        tmp_path / "no_checkpoint_here",
        tmp_path,
        node_name=NODE.strip("/"),
        autostart=False,
        inject_delay_s=INFERENCE_DELAY_S,
        warmup_inferences=1,
    )
    try:
        assert lifecycle_state(ros_node, NODE) == "unconfigured"

        # A bad checkpoint: configure fails with the reason, and the node stays unconfigured.
        assert change_state(ros_node, NODE, "configure") is False
        assert lifecycle_state(ros_node, NODE) == "unconfigured"
        assert (
            "configure failed:" in server.log_text() and "no_checkpoint_here" in server.log_text()
        )

        # Unconfigured, a start-up parameter may change: the next configure reads it.
        assert set_parameters(ros_node, NODE, checkpoint=str(act_checkpoint))[0].successful
        assert change_state(ros_node, NODE, "configure") is True
        assert lifecycle_state(ros_node, NODE) == "inactive"
        assert not status_of(ros_node).ready
        refused = RobotClient(ros_node, "early_arm", NODE).open()
        assert not refused.accepted and "lifecycle state 'inactive'" in refused.message

        assert change_state(ros_node, NODE, "activate") is True
        robot = RobotClient(ros_node, "managed_arm", NODE)
        assert robot.open().accepted
        assert chunk_from_msg(robot.request(robot.observation(1))).status == 0

        # Deactivate while a request is in flight: it is answered, then new sessions are refused.
        robot.send(robot.observation(2))
        spin_until(ros_node, lambda: False, INFERENCE_DELAY_S / 2)
        assert change_state(ros_node, NODE, "deactivate") is True
        assert spin_until(ros_node, lambda: any(chunk.seq == 2 for chunk in robot.chunks), 10), (
            "in-flight unanswered"
        )
        assert next(chunk for chunk in robot.chunks if chunk.seq == 2).status == 0
        refused = RobotClient(ros_node, "late_arm", NODE).open()
        assert not refused.accepted and "lifecycle state 'inactive'" in refused.message
        assert "session" in server.log_text() and "the server stopped serving" in server.log_text()

        # Activate again: the same loaded policy serves a new session.
        assert change_state(ros_node, NODE, "activate") is True
        again = RobotClient(ros_node, "returning_arm", NODE)
        assert again.open().accepted
        assert chunk_from_msg(again.request(again.observation(1))).status == 0

        # Runtime parameters: applied at once, or refused with the reason.
        accepted, invalid, startup_only = set_parameters(
            ros_node, NODE, max_batch_size=3, session_idle_timeout_s=-1.0, checkpoint="elsewhere"
        )
        assert accepted.successful
        assert (invalid.successful, invalid.reason) == (
            False,
            "'session_idle_timeout_s' is -1.0, expected more than 0",
        )
        assert (
            not startup_only.successful
            and "'checkpoint' takes effect only at start-up" in startup_only.reason
        )
        assert status_of(ros_node).max_batch_size == 3  # applied before the set was answered

        assert change_state(ros_node, NODE, "deactivate") is True
        assert change_state(ros_node, NODE, "cleanup") is True
        assert lifecycle_state(ros_node, NODE) == "unconfigured"
        assert change_state(ros_node, NODE, "shutdown") is True
        assert lifecycle_state(ros_node, NODE) == "finalized"
        assert stop(server.process, timeout_s=15) == 0, server.log_text()[-3000:]
    finally:
        stop(server.process, timeout_s=15)
