"""What the status thread publishes each period: ~/status, /diagnostics, a goal's feedback and end,
the log.

Invariants:

* one core snapshot per period feeds ~/status, /diagnostics and the active
  goal (its end or its feedback), so they never disagree; the goal is
  followed first, so a goal that just ended is already in that status;
* /diagnostics goes out every ``DIAGNOSTICS_PERIOD_S``, not at the status
  rate;
* every fail-safe transition is logged once (``transitions_since``), a
  recovery to STREAMING as news rather than trouble, and new request
  refusals as one throttled warning.

ROS shell: runs on the status ``ControlLoop``'s thread, started and stopped
by the node.
"""

from __future__ import annotations

import dataclasses
import time

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.publisher import Publisher

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.goals.goal_runs import Progress
from lerobot_ros.executor.goals.goal_server import publish_feedback
from lerobot_ros.executor.goals.goal_steps import GoalSteps
from lerobot_ros.protocol.status import ExecutorState
from lerobot_ros.protocol.telemetry import DIAGNOSTICS_PERIOD_S
from lerobot_ros.protocol.wire import control_plane


class StatusReport:
    def __init__(
        self,
        node: Node,
        core: ExecutorCore,
        goal_steps: GoalSteps,
        status_pub: Publisher,
        diagnostics_pub: Publisher,
    ) -> None:
        self.node, self.core, self.goal_steps = node, core, goal_steps
        self.status_pub, self.diagnostics_pub = status_pub, diagnostics_pub
        self._diagnostics_due = 0.0
        self._transitions_logged = 0
        self._rejections_logged = 0

    def publish(self) -> None:
        now = time.monotonic()
        snapshot = self.core.snapshot(now)
        followed = self.goal_steps.follow(Progress.of(snapshot, now))
        if followed is not None:
            feedback, handle = followed
            publish_feedback(handle, feedback)
        telemetry = dataclasses.replace(snapshot.telemetry, **self.goal_steps.book.telemetry())
        stamp = self.node.get_clock().now().to_msg()
        self.status_pub.publish(control_plane.executor_status_to_msg(telemetry, stamp))
        if now >= self._diagnostics_due:
            self._diagnostics_due = now + DIAGNOSTICS_PERIOD_S
            diagnostics = DiagnosticArray(
                status=[
                    control_plane.executor_diagnostic(
                        f"{self.node.get_name()}: chunk executor", telemetry
                    )
                ]
            )
            diagnostics.header.stamp = stamp
            self.diagnostics_pub.publish(diagnostics)
        self._log_transitions()
        if telemetry.request_rejections > self._rejections_logged:
            self._rejections_logged = telemetry.request_rejections
            self.node.get_logger().warning(
                f"the server refused a request ({telemetry.request_rejections} so far): "
                f"{telemetry.last_rejection_reason}",
                throttle_duration_sec=5.0,
            )

    def _log_transitions(self) -> None:
        transitions, self._transitions_logged = self.core.transitions_since(
            self._transitions_logged
        )
        logger = self.node.get_logger()
        for transition in transitions:
            text = (
                f"{transition.from_state.name} -> {transition.to_state.name}: {transition.reason}"
            )
            # A saturated link flips STALLED <-> STREAMING every chunk, and only the first half
            # deserves a warning. (rclpy refuses one call site logging at two severities: one call
            # each.)
            if transition.to_state is ExecutorState.DEAD:
                logger.error(text)
            elif transition.to_state is ExecutorState.STREAMING:
                logger.info(text)
            else:
                logger.warning(text)
