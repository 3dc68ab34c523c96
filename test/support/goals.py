"""A RunPolicy goal sent by a real rclpy action client, for tests."""

from __future__ import annotations

from rclpy.action import ActionClient

from lerobot_ros.action import RunPolicy
from support.ros import spin_until

WAIT_S = 20.0


class GoalRun:
    """One RunPolicy goal sent by a real action client; its feedback collected as it comes."""

    def __init__(
        self,
        client: ActionClient,
        node,
        task: str = "",
        max_duration_s: float = 0.0,
        new_episode: bool = False,
    ) -> None:
        self.node, self.feedback = node, []
        goal = RunPolicy.Goal(task=task, max_duration_s=max_duration_s, new_episode=new_episode)
        future = client.send_goal_async(
            goal, feedback_callback=lambda msg: self.feedback.append(msg.feedback)
        )
        assert spin_until(node, future.done, WAIT_S), "the goal was not answered"
        self.handle = future.result()
        self.result_future = self.handle.get_result_async() if self.handle.accepted else None

    def wait_feedback(self, predicate, what: str):
        assert spin_until(self.node, lambda: any(predicate(f) for f in self.feedback), WAIT_S), (
            f"no feedback with {what}; got {self.feedback[-1:]}"
        )

    def result(self, timeout_s: float = WAIT_S) -> RunPolicy.Result:
        assert spin_until(self.node, self.result_future.done, timeout_s), "no result"
        return self.result_future.result().result

    def cancel(self) -> None:
        future = self.handle.cancel_goal_async()
        assert spin_until(self.node, future.done, WAIT_S)
