"""policy_server_node sessions and data plane, against a real server process.

The suite's shared server (conftest.policy_server) serves the random ACT
checkpoint at /lerobot with capacity 4. Each test closes what it opens.
"""

import json
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from lerobot_ros.msg import ActionChunk
from lerobot_ros.protocol.wire.data_plane import chunk_from_msg
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from lerobot_ros.srv import OpenSession
from support.jsonl import read_jsonl
from support.robot_client import RobotClient
from support.ros import call_service, spin_until


@pytest.fixture
def robots(policy_server, ros_node):
    opened = []

    def make(client_id):
        robot = RobotClient(ros_node, client_id)
        opened.append(robot)
        return robot

    yield make
    for robot in opened:
        if robot.session_id:
            robot.close()


def test_two_robots_at_once_get_their_own_correctly_shaped_chunks(robots):
    left, right = robots("left_arm"), robots("right_arm")
    for robot in (left, right):
        response = robot.open()
        assert response.accepted, response.message
        assert response.observation_topic == f"/lerobot/clients/{robot.client_id}/observation"
        assert response.action_chunk_topic == f"/lerobot/clients/{robot.client_id}/action_chunk"
    states = {"left_arm": np.zeros(6), "right_arm": np.full(6, 0.8)}
    for seq in range(3):
        # Both in flight at once; each waits for its own answer.
        messages = {
            robot.client_id: robot.observation(seq, state=states[robot.client_id])
            for robot in (left, right)
        }
        for robot in (left, right):
            robot.send(messages[robot.client_id])
        for robot in (left, right):
            chunk = robot.request(messages[robot.client_id])
            assert chunk.status == ActionChunk.STATUS_OK, chunk.error
            assert (chunk.client_id, chunk.session_id) == (robot.client_id, robot.session_id)
            assert (chunk.chunk_length, chunk.action_dim) == (50, 6)
            assert list(chunk.action_names) == list(SO101_JOINT_NAMES)
    assert all(chunk.client_id == "left_arm" for chunk in left.chunks)
    assert all(chunk.client_id == "right_arm" for chunk in right.chunks)
    left_actions = chunk_from_msg(left.chunks[-1]).actions_robot
    right_actions = chunk_from_msg(right.chunks[-1]).actions_robot
    assert not np.allclose(left_actions, right_actions), (
        "different states must give different chunks"
    )


def test_wrong_action_order_is_refused_with_both_lists(robots):
    swapped = [SO101_JOINT_NAMES[1], SO101_JOINT_NAMES[0], *SO101_JOINT_NAMES[2:]]
    response = robots("swapped_arm").open(action_names=swapped)
    assert not response.accepted
    assert response.refusal == OpenSession.Response.REFUSAL_ACTION_NAMES
    assert str(list(SO101_JOINT_NAMES)) in response.message and str(swapped) in response.message
    assert list(response.capabilities.action_names) == list(SO101_JOINT_NAMES)


def test_capacity_refusal_carries_the_load_and_reopening_does_not_count(robots):
    for index in range(4):
        assert robots(f"arm_{index}").open().accepted
    refused = robots("arm_4").open()
    assert not refused.accepted and refused.refusal == OpenSession.Response.REFUSAL_CAPACITY
    assert (refused.active_sessions, refused.max_sessions) == (4, 4)
    assert "4 of 4" in refused.message
    reopened = robots("arm_0")
    response = reopened.open()
    assert response.accepted and response.active_sessions == 4


def test_bad_client_id_is_refused_not_crashed_on(robots, policy_server):
    response = robots("bad-id").open()
    assert not response.accepted and response.refusal == OpenSession.Response.REFUSAL_BAD_CLIENT_ID
    assert "'bad-id' is not a valid ROS name segment" in response.message
    assert policy_server.process.poll() is None


def test_malformed_observations_are_rejected_while_another_robot_keeps_streaming(robots):
    healthy, broken = robots("healthy_arm"), robots("broken_arm")
    assert healthy.open().accepted and broken.open().accepted
    bad = [
        (broken.observation(0, state=np.zeros(4)), "state has 4 values; the policy expects 6"),
        (broken.observation(1, state=[np.nan] * 6), "not finite"),
        (broken.observation(2, schema_version=7), "schema version 7"),
        (
            broken.observation(3, compressed_camera_names=["observation.images.side"]),
            "missing ['observation.images.front']",
        ),
    ]
    corrupt = broken.observation(4)
    corrupt.compressed_images[0].data = b"\xff\xd8garbage"
    bad.append((corrupt, "camera 'observation.images.front'"))
    for index, (msg, expected) in enumerate(bad):
        broken.send(msg)
        chunk = healthy.request(healthy.observation(index))
        assert chunk.status == ActionChunk.STATUS_OK, chunk.error
        answer = broken.request(msg)
        assert answer.status == ActionChunk.STATUS_REJECTED and expected in answer.error, (
            answer.error
        )
        assert len(answer.actions_robot) == 0
    # the session still works
    assert broken.request(broken.observation(10)).status == ActionChunk.STATUS_OK


def test_a_burst_is_answered_newest_first_never_out_of_order(robots):
    # Keep-last-1 transport and the newest-wins mailbox may both drop older
    # observations of a burst; what must hold: the newest is answered, and
    # no older observation is answered after a newer one.
    robot = robots("burst_arm")
    assert robot.open().accepted
    for seq in range(6):
        robot.send(robot.observation(seq))
    last = robot.request(robot.observation(6), timeout_s=30)
    assert last.status == ActionChunk.STATUS_OK
    answered = [chunk.seq for chunk in robot.chunks]
    assert answered == sorted(set(answered)) and answered[-1] == 6
    assert len(answered) + sum(chunk.superseded for chunk in robot.chunks) <= 7


def test_reset_episode_refuses_the_old_and_the_current_episode(robots):
    robot = robots("episodic_arm")
    assert robot.open().accepted
    assert robot.request(robot.observation(0, episode=0)).status == ActionChunk.STATUS_OK
    response = robot.reset_episode(1)
    assert response.success and response.episode == 1
    stale = robot.request(robot.observation(1, episode=0))
    assert stale.status == ActionChunk.STATUS_REJECTED and "episode 0 is over" in stale.error
    assert robot.request(robot.observation(2, episode=1)).status == ActionChunk.STATUS_OK
    again = robot.reset_episode(1)
    assert not again.success and again.episode == 1, (
        "a reset must name a later episode (ResetEpisode.srv)"
    )
    assert "episode 1 is not after the current episode 1" in again.message
    older = robot.reset_episode(0)
    assert not older.success and "episode 0 is not after the current episode 1" in older.message


def _topic_has_subscriber(node, topic):
    return node.count_subscribers(topic) > 0


def test_close_and_idle_collection_destroy_the_data_plane(robots, ros_node):
    closing, idle = robots("closing_arm"), robots("idle_arm")
    assert closing.open().accepted and idle.open().accepted
    topic = "/lerobot/clients/closing_arm/observation"
    assert spin_until(ros_node, lambda: _topic_has_subscriber(ros_node, topic), 5)
    assert closing.close().success
    closing.session_id = ""
    assert spin_until(ros_node, lambda: not _topic_has_subscriber(ros_node, topic), 5), (
        "topic survived close"
    )
    again = closing.close()
    assert not again.success and "no open session" in again.message
    # The idle robot never sends: collected after the server's 3 s idle timeout.
    idle._disconnect()
    idle_topic = "/lerobot/clients/idle_arm/observation"
    assert spin_until(ros_node, lambda: not _topic_has_subscriber(ros_node, idle_topic), 10), (
        "idle session not collected"
    )
    idle.session_id = ""


def _metric(policy_server, name: str) -> float:
    with urllib.request.urlopen(
        f"http://127.0.0.1:{policy_server.http_port}/metrics", timeout=5
    ) as response:
        line = next(
            line for line in response.read().decode().splitlines() if line.startswith(name + " ")
        )
    return float(line.split()[1])


def test_a_standby_session_outwaits_the_timeouts_and_its_first_observation_promotes_it(
    robots, ros_node, policy_server
):
    from lerobot_ros.msg import ServerStatus
    from lerobot_ros.protocol.qos import STATUS_QOS
    from lerobot_ros.srv import GetStatus

    def standbys() -> int:
        return call_service(
            ros_node, GetStatus, "/lerobot/get_status", GetStatus.Request(), 20.0
        ).status.standby_sessions

    robot = robots("standby_arm")
    opened_at = time.monotonic()
    response = robot.open(standby=True)
    assert response.accepted, response.message
    assert standbys() == 1 and _metric(policy_server, "lerobot_ros_standby_sessions") == 1.0
    beats = []
    subscription = ros_node.create_subscription(
        ServerStatus, "/lerobot/status", beats.append, STATUS_QOS
    )
    try:
        assert spin_until(ros_node, lambda: beats and beats[-1].standby_sessions == 1, 5), (
            "no heartbeat with the standby"
        )
        assert beats[-1].active_sessions >= 1
        # Past session_first_observation_timeout_s (5 s) and session_idle_timeout_s (3 s), plus a
        # collection period.
        spin_until(ros_node, lambda: False, max(0.0, opened_at + 7.0 - time.monotonic()))
        assert standbys() == 1, "the standby was collected while its robot was connected"
        topic = "/lerobot/clients/standby_arm/observation"
        assert _topic_has_subscriber(ros_node, topic), "the standby's data plane was destroyed"
        chunk = robot.request(robot.observation(0))
        assert chunk.status == ActionChunk.STATUS_OK and chunk.session_id == robot.session_id, (
            chunk.error
        )
        assert standbys() == 0
        assert spin_until(ros_node, lambda: beats[-1].standby_sessions == 0, 5), (
            "the heartbeat still shows the standby"
        )
    finally:
        ros_node.destroy_subscription(subscription)
    assert _metric(policy_server, "lerobot_ros_standby_sessions") == 0.0
    promoted = [
        record
        for record in read_jsonl(policy_server.audit, '"standby_arm"')
        if record["outcome"] == "standby_promoted"
    ]
    assert (
        len(promoted) == 1
        and promoted[0]["session"] == robot.session_id
        and promoted[0]["standby_for_s"] >= 6.0
    )
    assert "standby session of standby_arm promoted" in policy_server.log_text()


def test_a_standby_whose_robot_left_is_collected(robots, ros_node, policy_server):
    robot = robots("departed_standby_arm")
    assert robot.open(standby=True).accepted
    topic = "/lerobot/clients/departed_standby_arm/observation"
    # the server's collection timer (1 s) sees the robot's publisher
    spin_until(ros_node, lambda: False, 2.0)
    robot._disconnect()
    assert spin_until(ros_node, lambda: not _topic_has_subscriber(ros_node, topic), 10), (
        "standby not collected"
    )
    robot.session_id = ""
    why = policy_server.log_text().split("departed_standby_arm closed: ")[-1].splitlines()[0]
    assert why.startswith("its observation publisher left the ROS graph") and why.endswith(
        "(standby)"
    ), why


def test_audit_log_has_one_line_per_request(robots, policy_server):
    robot = robots("audited_arm")
    assert robot.open().accepted
    for seq in range(4):
        robot.request(robot.observation(seq))
    robot.request(robot.observation(4, state=np.zeros(3)))  # rejected requests are audited too

    def lines():
        return read_jsonl(policy_server.audit, '"audited_arm"')

    assert spin_until(robot.node, lambda: len(lines()) == 5, 5), lines()
    records = lines()
    assert [record["seq"] for record in records] == [0, 1, 2, 3, 4]
    assert [record["outcome"] for record in records] == ["ok"] * 4 + ["rejected"]
    assert all(
        record["session"] == robot.session_id and record["inference_ms"] >= 0 for record in records
    )
    assert all(record["inference_ms"] > 0 for record in records[:4])


def test_health_metrics_diagnostics_and_capture(robots, policy_server, ros_node):
    from diagnostic_msgs.msg import DiagnosticArray

    from lerobot_ros.server.observability.capture import read_capture

    robot = robots("observed_arm")
    assert robot.open().accepted
    robot.request(robot.observation(0))
    base = f"http://127.0.0.1:{policy_server.http_port}"
    with urllib.request.urlopen(base + "/healthz", timeout=5) as response:
        assert response.status == 200 and json.loads(response.read())["status"] == "ok"
    with urllib.request.urlopen(
        base + "/livez", timeout=5
    ) as response:  # the liveness probe of deploy/kubernetes
        alive = json.loads(response.read())
        assert response.status == 200 and (alive["status"], alive["readiness"]) == (
            "alive",
            "ok",
        ), alive
    with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
        metrics = response.read().decode()
    served = next(
        line
        for line in metrics.splitlines()
        if line.startswith("lerobot_ros_requests_served_total ")
    )
    assert float(served.split()[1]) >= 1
    values = {
        line.split()[0]: float(line.split()[1])
        for line in metrics.splitlines()
        if line.startswith("lerobot_ros_")
    }
    assert values["lerobot_ros_max_batch_size"] == 8 and values["lerobot_ros_forwards_total"] >= 1
    assert values["lerobot_ros_batch_size_mean"] >= 1
    arrays = []
    subscription = ros_node.create_subscription(DiagnosticArray, "/diagnostics", arrays.append, 10)
    try:
        assert spin_until(ros_node, lambda: arrays, 5), "no /diagnostics within 5 s"
    finally:
        ros_node.destroy_subscription(subscription)
    status = arrays[0].status[0]
    assert "policy server" in status.name
    assert {value.key for value in status.values} >= {
        "active_sessions",
        "requests_served",
        "policy_type",
        "batch_size_mean",
    }
    records = [
        record
        for record in read_capture(policy_server.capture)
        if record["request"]["client_id"] == "observed_arm"
    ]
    assert records and records[0]["response"]["actions_robot"].shape == (50, 6)
    assert (
        records[0]["request"]["compressed_images"]["observation.images.front"]["data"][:2]
        == b"\xff\xd8"
    )


def test_a_capture_replays_offline_to_the_same_actions(
    robots, policy_server, act_checkpoint, tmp_path
):
    import shutil

    robot = robots("replayed_arm")
    assert robot.open().accepted
    for seq in range(3):
        robot.request(robot.observation(seq, state=np.full(6, 0.1 * seq)))
    robot.request(robot.observation(3, state=np.zeros(2)))  # rejected: skipped by the replay
    from lerobot_ros.server.observability.capture import read_capture

    def captured() -> int:  # the capture line is written just after the chunk is published
        return sum(
            record["request"]["client_id"] == "replayed_arm"
            for record in read_capture(policy_server.capture)
        )

    deadline = time.monotonic() + 10
    while captured() < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    shutil.copytree(policy_server.capture, tmp_path / "capture")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "lerobot_ros.server.replay",
            str(tmp_path / "capture"),
            "--checkpoint",
            str(act_checkpoint),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert result.returncode == 0, result.stderr[-2000:]
    assert summary["compared"] >= 3 and summary["skipped_not_ok"] >= 1
    assert summary["max_abs_difference"] <= 1e-5 and summary["differing"] == 0
