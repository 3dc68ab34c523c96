"""A server deactivated for longer than max_offline_s, then activated again: the robot comes back.

Real processes: a policy_server_node of this test's own (it is deactivated),
the stand-in robot driver (it records every command it receives) and a
chunk_executor_node with a small max_offline_s. Issue 33: before, the
executor went DEAD and nothing but cleanup -> configure -> activate
recovered it; its deactivate -> activate said "streaming" and changed nothing.
"""

from __future__ import annotations

import time

from lifecycle_msgs.msg import Transition
from lifecycle_msgs.srv import ChangeState

from support.executor_processes import is_hold, trigger
from support.ros import call_service, spin_until
from support.servers import start_server


def change_state(node, name: str, transition: int) -> ChangeState.Response:
    return call_service(
        node,
        ChangeState,
        f"{name}/change_state",
        ChangeState.Request(transition=Transition(id=transition)),
        30.0,
    )


def test_a_server_deactivated_past_max_offline_s_holds_then_streams_again_on_resume(
    act_checkpoint, tmp_path, ros_node, launched
):
    server = start_server(act_checkpoint, tmp_path, ros_node, node_name="offline_srv")
    try:
        robot = launched("/offline_arm", commands=[("forward_command", "/offline_arm/commands")])
        executor = launched.executor(
            "exec_offline",
            robot.executor_parameters(
                server_namespace=server.namespace, max_offline_s=2.0, reconnect_backoff_max_s=0.5
            ),
        )
        executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged >= 2, 60, "streaming"
        )

        assert change_state(ros_node, server.namespace, Transition.TRANSITION_DEACTIVATE).success
        held = executor.wait(
            lambda s: s.state_name == "OFFLINE" and "inactive" in s.reason,
            20,
            "OFFLINE with the server's own reason",
        )
        assert "still loading" not in held.reason
        since = time.monotonic()
        executor.spin(1.0)
        commands = [c for c in robot.commands() if c["t"] > since]
        assert commands and all(is_hold(c["values"]) for c in commands), "OFFLINE keeps holding"
        refused = trigger(ros_node, "/exec_offline/resume")
        assert not refused.success and "inactive" in refused.message, refused.message

        assert change_state(ros_node, server.namespace, Transition.TRANSITION_ACTIVATE).success
        executor.wait(
            lambda s: s.state_name == "OFFLINE" and "a session is open again" in s.reason,
            20,
            "reconnected on its own, still holding",
        )
        merged = executor.status.chunks_merged
        executor.spin(1.0)
        assert executor.status.chunks_merged == merged, "no motion before an explicit resume"
        resumed = trigger(ros_node, "/exec_offline/resume")
        assert resumed.success, resumed.message
        executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged > merged,
            30,
            "streaming again",
        )

        # Deactivated again past the budget: the executor's own deactivate -> activate brings it
        # back.
        assert change_state(ros_node, server.namespace, Transition.TRANSITION_DEACTIVATE).success
        executor.wait(lambda s: s.state_name == "OFFLINE", 20, "OFFLINE again")
        assert change_state(ros_node, "/exec_offline", Transition.TRANSITION_DEACTIVATE).success
        failed = change_state(ros_node, "/exec_offline", Transition.TRANSITION_ACTIVATE)
        assert not failed.success, "activate without a ready server fails (it changes nothing)"
        assert "inactive" in executor.log.read_text().split("activate failed:")[-1].splitlines()[0]
        assert change_state(ros_node, server.namespace, Transition.TRANSITION_ACTIVATE).success
        assert change_state(ros_node, "/exec_offline", Transition.TRANSITION_ACTIVATE).success
        merged = executor.status.chunks_merged
        executor.wait(
            lambda s: s.state_name == "STREAMING" and s.chunks_merged > merged,
            30,
            "streaming after the executor's activate",
        )
    finally:
        from lerobot_ros.processes import stop

        stop(server.process, timeout_s=10)


def test_ctrl_c_on_ros2_action_send_goal_cancels_the_goal(
    policy_server, launched, ros_node, tmp_path
):
    # Issue 33: the tool prints "Exception while canceling goal: None" at Ctrl-C; the docs say the
    # goal is cancelled all the same (chunk_executor_node.md): this checks it on what the executor
    # reports.
    import os
    import signal
    import subprocess

    import pytest

    from support.ros2_cli import RMW, ROS2, TOOLS_MISSING

    if TOOLS_MISSING:
        pytest.skip(TOOLS_MISSING)
    robot = launched("/cancel_arm", commands=[("forward_command", "/cancel_arm/commands")])
    executor = launched.executor("exec_cancel", robot.executor_parameters(wait_for_goal=True))
    executor.wait(lambda s: s.paused and s.session_id, 30, "holding, waiting for a goal")
    log = tmp_path / "send_goal.log"
    with log.open("w") as out:
        tool = subprocess.Popen(
            [
                ROS2,
                "action",
                "send_goal",
                "/exec_cancel/run_policy",
                "lerobot_ros/action/RunPolicy",
                "{max_duration_s: 0.0}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            # Unbuffered: the test reads what the tool printed while it runs.
            env={**os.environ, "RMW_IMPLEMENTATION": RMW, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
    try:
        goal = executor.wait(lambda s: s.goal_id != "", 30, "the tool's goal running")
        # The tool cancels at Ctrl-C only a goal it knows is running: its accept response and a
        # status update must have reached it (send_goal.py keeps no handle before the response,
        # and cancels only an ACCEPTED or EXECUTING one). Under load the executor reports the
        # goal before the tool has heard back: wait for the tool's own word, then give its spin
        # a second for the status message that follows.
        assert spin_until(ros_node, lambda: "Goal accepted with ID" in log.read_text(), 30), (
            log.read_text()
        )
        spin_until(ros_node, lambda: False, 1.0)
        os.killpg(tool.pid, signal.SIGINT)
        tool.wait(timeout=30)
    finally:
        if tool.poll() is None:
            os.killpg(tool.pid, signal.SIGKILL)
    ended = executor.wait(lambda s: s.last_goal_id == goal.goal_id, 20, "the goal ended")
    assert ended.last_goal_termination == "cancelled", (
        ended.last_goal_termination,
        log.read_text(),
    )
