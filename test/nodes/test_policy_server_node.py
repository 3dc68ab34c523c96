"""policy_server_node and chunk_executor_node as separate real processes."""

import subprocess
import sys

import pytest

from lerobot_ros.msg import ServerStatus
from lerobot_ros.processes import run_handshake
from lerobot_ros.protocol.wire import control_plane
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES
from lerobot_ros.srv import GetStatus
from support.ros import spin_until


def call(node, client, request, timeout_s=10.0):
    assert client.wait_for_service(timeout_sec=timeout_s), f"{client.srv_name} not available"
    future = client.call_async(request)
    assert spin_until(node, future.done, timeout_s), f"{client.srv_name} did not answer"
    return future.result()


def test_get_status_answers_a_client_in_another_process(policy_server, ros_node, act_checkpoint):
    client = ros_node.create_client(GetStatus, "/lerobot/get_status")
    status = call(ros_node, client, GetStatus.Request()).status
    ros_node.destroy_client(client)

    assert status.ready and not status.draining
    assert status.server_namespace == "/lerobot"
    assert len(status.instance_id) == 12
    capabilities = control_plane.capabilities_from_msg(status.capabilities)
    assert capabilities.policy_type == "act"
    assert capabilities.serving_mode == "shared"
    assert capabilities.action_names == SO101_JOINT_NAMES
    assert capabilities.state_dim == 6
    assert capabilities.camera_names == (FRONT_CAMERA,)
    assert (capabilities.cameras[0].height, capabilities.cameras[0].width) == (96, 128)
    assert capabilities.chunk_size == 50
    assert capabilities.trained_fps == 30.0
    assert capabilities.rtc_supported is False  # ACT has no RTC kwargs
    assert capabilities.model_id == str(act_checkpoint)
    assert len(capabilities.model_fingerprint) == 16


def test_heartbeat_is_published_with_increasing_sequence(policy_server, ros_node):
    beats = []
    subscription = ros_node.create_subscription(ServerStatus, "/lerobot/status", beats.append, 10)
    try:
        assert spin_until(ros_node, lambda: len(beats) >= 2, 15), "fewer than 2 heartbeats in 15 s"
    finally:
        ros_node.destroy_subscription(subscription)
    assert beats[1].heartbeat_seq > beats[0].heartbeat_seq
    assert beats[0].instance_id == beats[1].instance_id
    assert beats[1].uptime.sec + beats[1].uptime.nanosec * 1e-9 > 0
    assert list(beats[0].capabilities.action_names) == list(SO101_JOINT_NAMES)


def run_executor(parameters, timeout_s=60):
    return run_handshake({"server_namespace": "/lerobot", **parameters}, timeout_s=timeout_s)


def test_executor_handshake_accepts_a_matching_robot(policy_server):
    code, result, stderr = run_executor(
        {"joint_names": list(SO101_JOINT_NAMES), "camera_names": [FRONT_CAMERA], "state_dim": 6}
    )
    assert code == 0, stderr
    assert result["handshake"] == "accepted"
    assert result["policy_type"] == "act"
    assert len(result["model_fingerprint"]) == 16


def test_executor_handshake_refuses_a_swapped_joint_order_with_both_lists(policy_server):
    swapped = [SO101_JOINT_NAMES[1], SO101_JOINT_NAMES[0], *SO101_JOINT_NAMES[2:]]
    code, result, stderr = run_executor({"joint_names": swapped})
    assert code == 1
    assert result["handshake"] == "refused"
    assert str(list(SO101_JOINT_NAMES)) in result["reason"]
    assert str(swapped) in result["reason"]
    assert "handshake refused" in stderr


def test_executor_without_a_server_fails_fast_with_the_reason():
    code, result, _ = run_executor(
        {
            "server_namespace": "/nobody_here",
            "joint_names": list(SO101_JOINT_NAMES),
            "handshake_timeout_s": 1.0,
        }
    )
    assert code == 1
    assert result["reason"] == "no policy server answered on /nobody_here/get_status within 1 s"


def test_executor_without_joint_names_refuses_to_start():
    code, result, _ = run_executor({})
    assert code == 1
    assert "joint_names" in result["reason"]


@pytest.mark.parametrize(
    ("checkpoint_name", "expected"),
    [("does_not_exist", "is not a directory"), ("", "cannot load LeRobot checkpoint")],
    ids=["missing", "empty-directory"],
)
def test_server_start_up_errors_are_one_clear_line(tmp_path, checkpoint_name, expected):
    checkpoint = tmp_path / checkpoint_name
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.server.node",
            "--ros-args",
            "-p",
            f"checkpoint:={checkpoint}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "error: " in result.stderr and expected in result.stderr
    assert "Traceback" not in result.stderr


def test_the_node_module_imports_no_torch_before_rclpy_is_up():
    # torch and LeRobot take seconds to import; a signal then must reach run_node's handler
    # (startup.py), so the module imports them only when the policy loads.
    code = (
        "import sys, lerobot_ros.server.node; print(sorted(m for m in ('torch', 'lerobot') if "
        "m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", f"imported at module import: {result.stdout.strip()}"


# The loader thread is still inside torch when the process ends: left to the
# interpreter's finalization it died in std::terminate (exit -6): both cases in
# a CI run, 9 of 16 runs of a script signalling 0.3-0.4 s after "loading"; on a
# quiet machine this test seldom catches it. A long warm-up keeps it busy there.
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_signal_during_start_up_ends_the_server_cleanly(act_checkpoint, tmp_path, signal_name):
    import signal
    import time

    from lerobot_ros.processes import spawn_node, stop

    log_path = tmp_path / "server.log"
    with log_path.open("w") as log:
        # Its own node name: the suite's shared server owns /lerobot.
        process = spawn_node(
            "lerobot_ros.server.node",
            {"checkpoint": str(act_checkpoint), "warmup_inferences": 40},
            log=log,
            node_name="lerobot_signal_test",
        )
    try:
        deadline = time.monotonic() + 60
        while "loading" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert "loading" in log_path.read_text(), log_path.read_text()
        process.send_signal(getattr(signal, signal_name))
        process.wait(timeout=60)
    finally:
        stop(process)
    output = log_path.read_text()
    assert process.returncode == 0, output
    assert "Traceback" not in output
    assert "warm-up done" not in output, (
        "the signal arrived during start-up; the node must stop there"
    )
    assert "ready: serving" not in output


def test_invalid_parameters_are_all_reported_before_loading():
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.server.node",
            "--ros-args",
            "-p",
            "dtype:=float64",
            "-p",
            "device:=gpu0",
            "-p",
            "heartbeat_period_s:=0.0",
            "-p",
            "warmup_inferences:=-1",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    for expected in (
        "'checkpoint' is empty",
        "'dtype' is 'float64', expected one of ['float32', 'float16', 'bfloat16']",
        "'device' is 'gpu0'",
        "'heartbeat_period_s' is 0.0",
        "'warmup_inferences' is -1",
    ):
        assert expected in result.stderr
    assert "Traceback" not in result.stderr
    assert "loading" not in result.stderr


def test_cuda_requested_without_cuda_is_a_clear_error(act_checkpoint):
    import torch

    from lerobot_ros.server.policy.checkpoint import CheckpointError, load_policy

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(CheckpointError, match="CUDA is not available here"):
        load_policy(str(act_checkpoint), device="cuda:0")


def _status(ros_node):
    client = ros_node.create_client(GetStatus, "/lerobot/get_status")
    try:
        return call(ros_node, client, GetStatus.Request()).status
    finally:
        ros_node.destroy_client(client)


def test_a_latency_budget_refuses_the_robot_it_cannot_hold_and_status_shows_the_headroom(
    policy_server, ros_node
):
    """The capacity model across processes: a budget below one forward refuses even the first robot
    with the predicted p95 against the budget; a generous one admits it; status shows budget,
    headroom and prediction."""
    from lerobot_ros.srv import OpenSession
    from support.lifecycle import set_parameters
    from support.robot_client import RobotClient

    def status_with_budget(budget_ms):  # the figures are recomputed at most once a second
        statuses = []
        spin_until(
            ros_node,
            lambda: (
                statuses.append(_status(ros_node)) or statuses[-1].latency_budget_ms == budget_ms
            ),
            15,
        )
        return statuses[-1]

    try:
        assert all(
            result.successful
            for result in set_parameters(ros_node, "/lerobot", latency_budget_ms=1.0)
        )
        tight = status_with_budget(1.0)
        assert tight.latency_budget_ms == 1.0 and tight.headroom_robots == 0, tight
        refused = RobotClient(ros_node, "capacity_arm").open()
        assert not refused.accepted and refused.refusal == OpenSession.Response.REFUSAL_CAPACITY, (
            refused.message
        )
        assert (
            "exceeds latency_budget_ms 1 " in refused.message
            and "predicted p95 round trip" in refused.message
        )
        assert "forward t(b) =" in refused.message, refused.message

        assert all(
            result.successful
            for result in set_parameters(ros_node, "/lerobot", latency_budget_ms=60000.0)
        )
        robot = RobotClient(ros_node, "capacity_arm")
        accepted = robot.open()
        assert accepted.accepted, accepted.message
        try:
            assert robot.request(robot.observation(1)).status == 0
            roomy = status_with_budget(60000.0)
            assert roomy.headroom_robots > 0 and roomy.predicted_p95_ms > 0, roomy
        finally:
            robot.close()
    finally:
        set_parameters(ros_node, "/lerobot", latency_budget_ms=0.0)
    assert status_with_budget(0.0).headroom_robots == -1
