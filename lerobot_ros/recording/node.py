"""episode_recorder_node: records task episodes of a robot as a LeRobot v3 dataset.

ROS entities (in the node's namespace):
  <state_topic>           sensor_msgs/JointState (sub) -> observation.state, by joint name
  <camera_topics[i]>      sensor_msgs/Image or CompressedImage (sub) -> <camera_names[i]>;
                          the first one samples frames
  <command_topic>         the command_mode's message (sub) -> action: what the arm was told
                          to do
  <task_status_topic>     lerobot_ros/TaskStatus (sub, episode_source task) -> episode
                          boundaries, outcome, task text
  <executor_status_topic> lerobot_ros/ExecutorStatus (sub, episode_source run_policy or
                          executor_episode) -> the same, from an executor

Expert demonstrations (sim_robot_node with ``expert``) and policy rollouts
(chunk_executor_node publishing the commands) are recorded alike; on a real
robot, with no simulated task, the executor's RunPolicy goals or episode
ids cut the episodes. The episode logic is ``episodes.EpisodeBuffer`` and
its followers ``TaskEpisodes`` / ``ExecutorEpisodes`` (plain Python); the dataset
calls are ``dataset`` (LeRobot's ``LeRobotDataset``), made only by the
writer thread, so writing an episode never stalls the subscriptions. On
SIGINT/SIGTERM, or after ``max_episodes``, the episode in progress is
dropped whole, the finished ones still queued are written, and the dataset
is finalized.

Invariant: what is on disk is always a valid dataset of whole episodes.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading
import time
from pathlib import Path

from rclpy.node import Node
from sensor_msgs.msg import CompressedImage, Image, JointState

from lerobot_ros.msg import ExecutorStatus, TaskStatus
from lerobot_ros.node_shell.node_support import NodeStartupError, declare_settings, run_node
from lerobot_ros.protocol.qos import COMMAND_QOS, SENSOR_QOS, STATUS_FOLLOWER_QOS, STATUS_QOS
from lerobot_ros.protocol.wire import images
from lerobot_ros.protocol.wire.output_modes import OUTPUT_MODES, reorder_by_name
from lerobot_ros.recording.episodes import (
    TASK_SOURCE,
    EpisodeBuffer,
    ExecutorEpisodes,
    ExecutorSample,
    FinishedEpisode,
    TaskEpisodes,
    dataset_features,
)
from lerobot_ros.recording.settings import RecorderSettings

NODE_NAME = "episode_recorder"


class EpisodeRecorderNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.settings = settings = declare_settings(self, RecorderSettings)
        from lerobot_ros.recording.dataset import DatasetRefused, open_dataset

        features = dataset_features(settings.joint_names, settings.cameras, settings.use_videos)
        try:
            self.dataset = open_dataset(
                Path(settings.dataset_root),
                settings.repo_id,
                features,
                settings.fps,
                settings.use_videos,
            )
        except DatasetRefused as error:
            raise NodeStartupError(str(error)) from error
        self.buffer = EpisodeBuffer(settings.joint_names, settings.cameras)
        by_task = settings.episode_source == TASK_SOURCE
        self.task_episodes = TaskEpisodes(self.buffer) if by_task else None
        self.executor_episodes = (
            None if by_task else ExecutorEpisodes(self.buffer, settings.episode_source)
        )
        self.episodes_queued = 0
        self.episodes_written = 0
        self.frames_written = 0
        self.accepting = True
        self.pending: queue.Queue[FinishedEpisode | None] = queue.Queue()
        self.writer = threading.Thread(
            target=self.write_episodes, name="dataset_writer", daemon=True
        )
        self.writer.start()
        self.mode = OUTPUT_MODES[settings.command_mode]
        self.get_logger().info(
            f"recording {settings.dataset_root} ({self.dataset.meta.total_episodes} episodes "
            "already) at "
            f"{settings.fps} fps; {self._subscribe(by_task)}"
        )

    def _subscribe(self, by_task: bool) -> str:
        """The state, camera, command and episode subscriptions; where episodes and actions come
        from, in words."""
        settings = self.settings
        self.create_subscription(JointState, settings.state_topic, self.on_joint_state, SENSOR_QOS)
        for name, topic, transport in zip(
            settings.camera_names, settings.camera_topics, settings.camera_transports, strict=False
        ):
            message_type = CompressedImage if transport == "compressed" else Image
            self.create_subscription(
                message_type, topic, lambda msg, name=name: self.on_camera(name, msg), SENSOR_QOS
            )
        command_topic = settings.command_topic or self.mode.sim_topic
        self.create_subscription(
            self.mode.message_type, command_topic, self.on_command, COMMAND_QOS
        )
        if by_task:
            episodes_from = settings.task_status_topic
            self.create_subscription(TaskStatus, episodes_from, self.on_task_status, STATUS_QOS)
        else:
            episodes_from = f"{settings.executor_status_topic} ({settings.episode_source})"
            self.create_subscription(
                ExecutorStatus,
                settings.executor_status_topic,
                self.on_executor_status,
                STATUS_FOLLOWER_QOS,
            )
        return f"episodes from {episodes_from}, actions from {command_topic}"

    def on_joint_state(self, msg: JointState) -> None:
        try:
            self.buffer.on_joint_state(
                reorder_by_name(msg.name, msg.position, self.settings.joint_names)
            )
        except ValueError as error:
            self.get_logger().warning(f"joint state ignored: {error}", throttle_duration_sec=2.0)

    def on_command(self, msg) -> None:
        try:
            command = self.mode.read(msg, self.settings.joint_names)
        except ValueError as error:
            self.get_logger().warning(f"command ignored: {error}", throttle_duration_sec=2.0)
            return
        self.buffer.on_command(command.positions[0])

    def on_camera(self, name: str, msg) -> None:
        try:
            rgb = images.resize_rgb(
                images.image_message_to_rgb(msg),
                self.settings.image_height,
                self.settings.image_width,
            )
        except ValueError as error:
            self.get_logger().warning(
                f"camera {name} frame ignored: {error}", throttle_duration_sec=2.0
            )
            return
        if self.accepting:
            self.buffer.on_camera(name, rgb)

    def on_task_status(self, msg: TaskStatus) -> None:
        if self.accepting:
            self._follow(
                lambda: self.task_episodes.on_status(
                    msg.episode, msg.phase, msg.elapsed_s, msg.expert_active, msg.task
                ),
                "expert" if msg.expert_active else "policy",
            )

    def on_executor_status(self, msg: ExecutorStatus) -> None:
        if self.accepting:
            self._follow(
                lambda: self.executor_episodes.on_status(ExecutorSample.of(msg), time.monotonic()),
                f"goal {msg.goal_id}" if msg.goal_id else f"executor episode {msg.episode}",
            )

    def _follow(self, step, what: str) -> None:
        """One status through its follower: log a start, queue an episode that ended whole."""
        was_recording = self.buffer.recording
        finished = step()
        if self.buffer.recording is not None and was_recording != self.buffer.recording:
            self.get_logger().info(f"recording episode {self.buffer.recording} ({what})")
        if finished is None:
            return
        self.pending.put(finished)
        self.episodes_queued += 1
        self.get_logger().info(
            f"episode {finished.key} ended {finished.outcome} after {finished.elapsed_s:.2f} s: "
            f"{len(finished.frames)} frames queued for writing"
        )
        if self.settings.max_episodes and self.episodes_queued >= self.settings.max_episodes:
            self.accepting = False
            # The same orderly stop as an operator's Ctrl-C: run_node ends the loop and calls
            # drain.
            os.kill(os.getpid(), signal.SIGINT)

    def write_episodes(self) -> None:
        from lerobot_ros.recording.dataset import write_episode

        while (episode := self.pending.get()) is not None:
            try:
                index = write_episode(self.dataset, episode)
            except (
                Exception
            ) as error:  # a dataset that cannot be written must stop the recording, loudly
                self.get_logger().error(
                    f"writing episode {episode.key} failed: {error!r}; stopping"
                )
                self.accepting = False
                os.kill(os.getpid(), signal.SIGINT)
                return
            self.episodes_written += 1
            self.frames_written += len(episode.frames)
            self.get_logger().info(
                f"wrote dataset episode {index} ({episode.source} {episode.key}, "
                f"{episode.outcome})"
            )

    def on_stop_requested(self) -> None:
        self.accepting = False

    def drain(self, spin_once) -> None:
        """Drop the episode in progress, write the finished ones, finalize the dataset."""
        dropped_frames = self.buffer.abandon()
        self.pending.put(None)
        self.writer.join()
        self.dataset.finalize()
        summary = {
            "dataset_root": self.settings.dataset_root,
            "episodes_written": self.episodes_written,
            "frames_written": self.frames_written,
            "total_episodes": self.dataset.meta.total_episodes,
            "dropped_episodes": self.buffer.dropped_episodes,
            "dropped_frames": dropped_frames,
        }
        self.get_logger().info("dataset finalized: " + json.dumps(summary))
        print(json.dumps(summary), flush=True)


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(EpisodeRecorderNode, args))


if __name__ == "__main__":
    main()
