"""RunPolicy's ROS side: the action server and its StartPolicy / StopPolicy mirror services.

Invariant: these callbacks only turn ROS requests into ``goal_steps`` calls
and their values into ROS messages; which goal runs, in which order a start
or an end acts on the robot, and how an action goal ends are decided in
``goal_steps.py``. Goals run in a reentrant group: a goal's waiter blocks one
executor thread while another goal may preempt it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import ReentrantCallbackGroup
from rclpy.node import Node

from lerobot_ros.action import RunPolicy
from lerobot_ros.executor.goals.goal_runs import Feedback, GoalRequest
from lerobot_ros.executor.goals.goal_steps import GoalSteps, action_verdict
from lerobot_ros.protocol.status import Termination
from lerobot_ros.srv import StartPolicy, StopPolicy


def goal_request_of(goal: RunPolicy.Goal) -> GoalRequest:
    return GoalRequest(goal.task, goal.max_duration_s, goal.new_episode)


class GoalServer:
    """``~/run_policy``, ``~/start_policy`` and ``~/stop_policy`` on ``node``; ``lifecycle()`` is
    (active, state label)."""

    def __init__(
        self, node: Node, steps: GoalSteps, lifecycle: Callable[[], tuple[bool, str]]
    ) -> None:
        self.node, self.steps, self.lifecycle = node, steps, lifecycle
        group = ReentrantCallbackGroup()
        self.action_server = ActionServer(
            node,
            RunPolicy,
            "~/run_policy",
            self.execute_goal,
            goal_callback=self.on_goal_request,
            cancel_callback=lambda goal_handle: CancelResponse.ACCEPT,
            callback_group=group,
        )
        node.create_service(
            StartPolicy, "~/start_policy", self.on_start_policy, callback_group=group
        )
        node.create_service(StopPolicy, "~/stop_policy", self.on_stop_policy, callback_group=group)

    def destroy(self) -> None:
        self.action_server.destroy()

    def on_goal_request(self, goal: RunPolicy.Goal) -> GoalResponse:
        problem = self.steps.refusal(goal_request_of(goal), *self.lifecycle())
        if problem:
            self.node.get_logger().warning(f"RunPolicy goal rejected: {problem}")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def execute_goal(self, goal_handle) -> RunPolicy.Result:
        goal_id = uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid)).hex
        problem = self.steps.start(
            goal_id, goal_request_of(goal_handle.request), *self.lifecycle(), handle=goal_handle
        )
        if problem:
            goal_handle.abort()
            return RunPolicy.Result(termination=Termination.FAILED.value, reason=problem)
        result = self.steps.wait(goal_id, lambda: goal_handle.is_cancel_requested)
        getattr(goal_handle, action_verdict(result, goal_handle.is_cancel_requested))()
        return RunPolicy.Result(
            termination=result.termination.value,
            reason=result.reason,
            duration_s=result.duration_s,
            commands_published=result.commands_published,
            requests_sent=result.requests_sent,
            chunks_merged=result.chunks_merged,
            episode=result.episode,
        )

    def on_start_policy(
        self, request: StartPolicy.Request, response: StartPolicy.Response
    ) -> StartPolicy.Response:
        goal_id = uuid.uuid4().hex
        problem = self.steps.start(
            goal_id,
            GoalRequest(request.task, request.max_duration_s, request.new_episode),
            *self.lifecycle(),
        )
        response.accepted, response.message = problem is None, problem or f"goal {goal_id} started"
        response.goal_id = goal_id if problem is None else ""
        return response

    def on_stop_policy(
        self, request: StopPolicy.Request, response: StopPolicy.Response
    ) -> StopPolicy.Response:
        result = self.steps.cancel(None, "stopped by stop_policy")
        if result is None:
            response.success, response.message = False, "no goal was running"
            return response
        response.success, response.message = True, result.reason
        response.goal_id, response.termination = result.goal_id, result.termination.value
        response.duration_s, response.commands_published = (
            result.duration_s,
            result.commands_published,
        )
        response.requests_sent, response.chunks_merged = result.requests_sent, result.chunks_merged
        response.episode = result.episode
        return response


def publish_feedback(handle, feedback: Feedback) -> None:
    """A goal's feedback on its action (sent with every ~/status)."""
    handle.publish_feedback(
        RunPolicy.Feedback(
            state=feedback.state,
            state_name=feedback.state_name,
            queue_depth=feedback.queue_depth,
            commands_published=feedback.commands_published,
            latency_ms_p95=feedback.latency_ms_p95,
            episode=feedback.episode,
            elapsed_s=feedback.elapsed_s,
        )
    )
