"""Serving classes at start-up, exclusive serving and the SIGTERM drain, with real server
processes."""

import signal
import subprocess
import sys
import time

import pytest

from lerobot_ros.msg import ActionChunk, ServerStatus
from lerobot_ros.processes import stop
from lerobot_ros.protocol.wire import control_plane
from lerobot_ros.server.policy.checkpoint import load_policy
from lerobot_ros.server.policy.policy_families import UnsupportedPolicyError
from lerobot_ros.srv import OpenSession
from support.policies import write_unservable_checkpoint
from support.robot_client import RobotClient
from support.ros import spin_until
from support.servers import start_server

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_server_exclusive")


def test_forcing_shared_on_a_stateful_policy_is_refused(diffusion_checkpoint):
    with pytest.raises(UnsupportedPolicyError, match="serving_mode=shared is unsafe"):
        load_policy(str(diffusion_checkpoint), device="cpu", serving_mode="shared")


def test_an_unsupported_policy_family_stops_the_server_at_start_up(tmp_path):
    checkpoint = write_unservable_checkpoint(tmp_path / "vqbet")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.server.node",
            "--ros-args",
            "-p",
            f"checkpoint:={checkpoint}",
            "-r",
            "__node:=lerobot_unsupported",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "policy type 'vqbet' cannot be served" in result.stderr
    assert "'act'" in result.stderr  # the message lists what can be served
    assert "Traceback" not in result.stderr


@pytest.fixture(scope="module")
def diffusion_server(diffusion_checkpoint, tmp_path_factory, ros_node):
    server = start_server(
        diffusion_checkpoint,
        tmp_path_factory.mktemp("diffusion_server"),
        ros_node,
        node_name="lerobot_diffusion",
        warmup_inferences=1,
    )
    yield server
    stop(server.process)


def test_diffusion_is_served_exclusively_with_its_observation_history(diffusion_server, ros_node):
    first, second = (
        RobotClient(ros_node, "first_arm", "/lerobot_diffusion"),
        RobotClient(ros_node, "second_arm", "/lerobot_diffusion"),
    )
    response = first.open()
    assert response.accepted, response.message
    assert response.capabilities.serving_mode == "exclusive" and response.max_sessions == 1
    refused = second.open()
    assert not refused.accepted and refused.refusal == OpenSession.Response.REFUSAL_CAPACITY
    for seq in range(2):  # the second request stacks two observations of history
        chunk = first.request(first.observation(seq), timeout_s=60)
        assert chunk.status == ActionChunk.STATUS_OK, chunk.error
        assert (chunk.chunk_length, chunk.action_dim) == (8, 6)
    assert first.close().success
    assert "forced" not in diffusion_server.log_text()
    assert (
        "serving mode exclusive: diffusion keeps observation history"
        in diffusion_server.log_text()
    )


def test_sigterm_drain_stops_the_heartbeat_refuses_sessions_and_delivers_the_in_flight_chunk(
    diffusion_server, ros_node
):
    robot = RobotClient(ros_node, "draining_arm", "/lerobot_diffusion")
    assert robot.open().accepted
    beats = []
    subscription = ros_node.create_subscription(
        ServerStatus, "/lerobot_diffusion/status", beats.append, 10
    )
    try:
        assert spin_until(ros_node, lambda: beats, 10)
        # How long one request keeps the server busy on this machine (0.25-1 s), so the signal
        # lands inside the next.
        first = robot.request(robot.observation(0), timeout_s=60)
        assert first.status == ActionChunk.STATUS_OK, first.error
        busy_s = sum(
            control_plane.seconds_from_duration(d)
            for d in (first.queue_wait, first.preprocess, first.inference)
        )
        msg = robot.observation(1)
        sent = time.monotonic()
        robot.send(msg)
        # delivered and taken by the worker, well before the chunk is done
        time.sleep(min(0.3, busy_s / 3))
        diffusion_server.process.send_signal(signal.SIGTERM)
        signalled = time.monotonic()
        refused = RobotClient(ros_node, "late_arm", "/lerobot_diffusion").open()
        assert spin_until(ros_node, lambda: any(c.seq == msg.seq for c in robot.chunks), 30), (
            "the in-flight chunk never came"
        )
        chunk = next(c for c in robot.chunks if c.seq == msg.seq)
        assert chunk.status == ActionChunk.STATUS_OK and chunk.seq == 1
        server_busy = sum(
            control_plane.seconds_from_duration(d)
            for d in (chunk.queue_wait, chunk.preprocess, chunk.inference)
        )
        assert server_busy > signalled - sent, "the request was not in flight when SIGTERM arrived"
        assert not refused.accepted and refused.refusal == OpenSession.Response.REFUSAL_DRAINING
        beats_at_drain = len(beats)
        diffusion_server.process.wait(timeout=60)
        spin_until(ros_node, lambda: False, 0.5)
        assert len(beats) <= beats_at_drain + 1, "heartbeat kept going while draining"
    finally:
        ros_node.destroy_subscription(subscription)
    assert diffusion_server.process.returncode == 0, diffusion_server.log_text()[-3000:]
    log = diffusion_server.log_text()
    assert "draining" in log and "drained after" in log
    assert "Traceback" not in log
