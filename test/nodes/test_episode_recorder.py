"""episode_recorder_node as a real process: expert episodes from sim_robot_node into a real LeRobot dataset.

One simulated arm driven by its scripted expert; recorders come and go
against it: two whole episodes written and read back with LeRobot's own
dataset class (features, fps, episodes, and frame values against what was
published), and a second recorder appending to it, interrupted mid-episode,
leaves a valid dataset of whole episodes. (Refusing a dataset of other
features is tested on the real LeRobot dataset in test/unit/recording.)
"""

from __future__ import annotations

import json
import signal

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from support.ros import spin_until

from lerobot_ros.msg import TaskStatus
from lerobot_ros.processes import spawn_node, stop
from lerobot_ros.sim.so101 import FRONT_CAMERA, SO101_JOINT_NAMES

NAMESPACE = "/recorder_test"
IMAGE = (48, 64)
# LeRobot's dataset stack takes a while to import on a busy 2-core machine.
RECORDER_START_S = 120.0


@pytest.fixture(scope="module")
def expert_sim(tmp_path_factory):
    log_path = tmp_path_factory.mktemp("expert_sim") / "sim_robot.log"
    with log_path.open("w") as log:
        process = spawn_node("lerobot_ros.sim.robot_node", {"expert": True, "seed": 3, "task_timeout_s": 6.0},
                             log=log, namespace=NAMESPACE)
    yield process
    assert stop(process) == 0, log_path.read_text()


def start_recorder(tmp_path, dataset, name, **parameters):
    log_path = tmp_path / f"{name}.log"
    with log_path.open("w") as log:
        process = spawn_node("lerobot_ros.recording.node", {
            "dataset_root": str(dataset), "image_height": IMAGE[0], "image_width": IMAGE[1], **parameters,
        }, log=log, namespace=NAMESPACE, node_name=name)
    return process, log_path


def summary_of(log_path) -> dict:
    return json.loads([line for line in log_path.read_text().splitlines() if line.startswith("{")][-1])


def test_expert_episodes_are_recorded_whole_and_an_interrupted_recorder_leaves_a_valid_dataset(
        expert_sim, ros_node, tmp_path):
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    from lerobot_ros.recording.dataset import episode_records

    commands, states, statuses = [], [], []
    ros_node.create_subscription(Float64MultiArray, f"{NAMESPACE}/forward_position_controller/commands",
                                 lambda msg: commands.append(np.array(msg.data)), 100)
    ros_node.create_subscription(JointState, f"{NAMESPACE}/joint_states", lambda msg: states.append(np.array(msg.position)), 100)
    ros_node.create_subscription(TaskStatus, f"{NAMESPACE}/sim_robot/status", statuses.append, 10)
    dataset = tmp_path / "dataset"

    recorder, log_path = start_recorder(tmp_path, dataset, "recorder_a", max_episodes=2)
    assert spin_until(ros_node, lambda: recorder.poll() is not None, RECORDER_START_S + 40), log_path.read_text()
    assert recorder.returncode == 0, log_path.read_text()
    assert summary_of(log_path)["episodes_written"] == 2

    loaded = LeRobotDataset("local/so101_sim_reach", root=dataset)
    assert (loaded.num_episodes, loaded.fps) == (2, 30)
    assert loaded.features["action"]["names"] == list(SO101_JOINT_NAMES)
    assert loaded.features[FRONT_CAMERA]["shape"] == (*IMAGE, 3)
    records = episode_records(dataset)
    assert [(r["outcome"], r["expert"]) for r in records] == [("SUCCESS", True)] * 2
    assert {r["task_episode"] for r in records} <= {s.episode for s in statuses if s.phase == "SUCCESS"}
    assert sum(r["frames"] for r in records) == loaded.num_frames
    # Every 2nd s of recording is ~60 frames at 30 fps; each frame is a published command and joint state.
    assert loaded.num_frames >= 2 * 30
    published_commands, published_states = np.stack(commands), np.stack(states)
    for index in range(0, loaded.num_frames, 7):
        frame = loaded[index]
        action, state = frame["action"].numpy(), frame["observation.state"].numpy()
        assert np.abs(published_commands - action).max(axis=1).min() < 1e-6, f"frame {index}: action never published"
        assert np.abs(published_states - state).max(axis=1).min() < 1e-6, f"frame {index}: state never published"
        assert frame["task"] == "move the gripper to the cube and close it"
    assert loaded[loaded.num_frames - 1]["action"][5].item() <= 0.1, "the last frame has the gripper closing"

    # A second recorder appends to the same dataset and is interrupted while recording an episode.
    recorder, log_path = start_recorder(tmp_path, dataset, "recorder_b")
    assert spin_until(ros_node, lambda: "recording episode" in log_path.read_text() or recorder.poll() is not None,
                      RECORDER_START_S), log_path.read_text()
    recording = log_path.read_text()
    spin_until(ros_node, lambda: False, 1.0)  # some frames into the episode
    recorder.send_signal(signal.SIGINT)
    assert stop(recorder, timeout_s=60) == 0, log_path.read_text()
    summary = summary_of(log_path)
    assert summary["dropped_frames"] > 0, f"not interrupted mid-episode: {summary}\n{recording}"
    after = LeRobotDataset("local/so101_sim_reach", root=dataset)
    assert after.num_episodes == 2 + summary["episodes_written"] == summary["total_episodes"]
    assert after.num_frames == sum(r["frames"] for r in episode_records(dataset))
    after[after.num_frames - 1]  # the last frame of the last whole episode reads
