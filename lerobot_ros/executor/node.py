"""chunk_executor_node: the robot-side end of lerobot_ros (no torch, no LeRobot).

Turns action chunks from a policy_server_node into smooth, safe joint
commands at ``control_rate_hz`` (default ``fps``, the policy's rate). A
managed (lifecycle) node; what each transition does is ``lifecycle.py``:
configure validates every parameter, then handshakes (get_status +
open_session); activate streams; deactivate holds and closes the session;
cleanup and shutdown release everything. ``autostart`` (default true)
configures and activates at start-up: a refused or failed first handshake
then prints ``{"handshake": "refused", "reason": ...}`` on stdout and exits 1
before any command is published; an accepted one prints ``{"handshake":
"accepted", ...}`` and streams until SIGINT/SIGTERM, which closes the session.
``handshake_only:=true`` only checks the robot against the server and exits.
RunPolicy goals (``goals/``) run the policy for one task.

ROS entities (``~`` is the node's name, default chunk_executor):
  <state_topic>           sensor_msgs/JointState (sub, on _<name>_sensors: read when needed;
                          by joint name)
  <camera_topics[i]>      sensor_msgs/Image or CompressedImage (sub, on _<name>_sensors: read
                          when needed)
  <output_topic>          Float64MultiArray | JointTrajectory | JointState (pub, at
                          control_rate_hz)
  ~/status                lerobot_ros/ExecutorStatus (pub, every status_period_s, and at once
                          when a goal starts or ends or the episode changes)
  /diagnostics            diagnostic_msgs/DiagnosticArray (pub, every second)
  ~/pause, ~/resume, ~/reset_episode
                          std_srvs/Trigger (services)
  ~/run_policy            lerobot_ros/RunPolicy (action server)
  ~/start_policy, ~/stop_policy
                          lerobot_ros/StartPolicy, StopPolicy (the action's mirror services)
  ~/change_state, ~/get_state, ...
                          lifecycle_msgs (rclpy's lifecycle services)
  <replica>/status        lerobot_ros/ServerStatus (sub, per replica; heartbeat watchdog,
                          drains)
  <replica>/get_status, open_session, close_session, reset_episode
                          service clients, per replica ([auto]: replicas found on the graph;
                          a warm standby: session/server_link.py)
  <server>/clients/<client_id>/observation, action_chunk
                          pub/sub, the session's data plane

Threads (docs/explanation/architecture.md has the whole picture): the control loop
(``control_loop.ControlLoop``) ticks the core and publishes each command,
and never waits on a callback, the network or a lock held across I/O;
~/status, goal feedback and /diagnostics go out from a second ``ControlLoop``;
the sensors are read when needed, never spun (``sensor_node.py``); a
MultiThreadedExecutor runs chunks, heartbeats, operator services and
transitions in one mutually exclusive group, the server's answers in their
own, goals in a reentrant one (``goal_server.py``); the network worker
(``network_worker.NetworkWorker``) keeps one request in flight.

joint_trajectory mode publishes one single-point trajectory per tick, never the queued chunk:
every point passes the same fail-safe tick and safety envelope as the other modes
(output_modes.py).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_srvs.srv import Trigger

from lerobot_ros.executor.control.control_loop import ControlLoop
from lerobot_ros.executor.control.robot_limits import required_limits
from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.goals.goal_server import GoalServer
from lerobot_ros.executor.goals.goal_steps import HOLD_GOAL, GoalSteps
from lerobot_ros.executor.lifecycle import STATE_LABELS, ExecutorLifecycle, TransitionOutcome
from lerobot_ros.executor.requests.network_worker import NetworkWorker
from lerobot_ros.executor.requests.sensor_node import SensorNode
from lerobot_ros.executor.runtime_parameters import accept_runtime_parameters
from lerobot_ros.executor.session import recovery
from lerobot_ros.executor.session.handshake import HandshakeResult, check_server, handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration
from lerobot_ros.executor.session.server_link import RosServerLink
from lerobot_ros.executor.session.session_client import SessionClient
from lerobot_ros.executor.settings import ExecutorSettings, timing_warnings
from lerobot_ros.executor.status_report import StatusReport
from lerobot_ros.msg import ExecutorStatus, ServerStatus
from lerobot_ros.node_shell.node_support import (
    NodeDone,
    NodeStartupError,
    TransitionFailed,
    declare_settings,
    read_settings,
    run_autostart,
    run_node,
)
from lerobot_ros.protocol.qos import COMMAND_QOS, SENSOR_QOS, STATUS_QOS
from lerobot_ros.protocol.wire import control_plane
from lerobot_ros.protocol.wire.output_modes import OUTPUT_MODES

NODE_NAME = "chunk_executor"

CLOSE_TIMEOUT_S = 2.0
RESET_TIMEOUT_S = 2.0
WORKER_JOIN_TIMEOUT_S = 3.0
CONTROL_JOIN_TIMEOUT_S = 1.0
#: Threads of the executor: the node's group, the server's answers, a goal and its preemptor.
EXECUTOR_THREADS = 4

#: The name the lifecycle's hold goes by (core.pause / resume; the goal's is goal_steps.HOLD_GOAL).
HOLD_LIFECYCLE = "lifecycle"


def report(result: dict) -> None:
    """The start-up outcome as one JSON line on stdout (read by tests and the demo)."""
    print(json.dumps(result), flush=True)


class ChunkExecutorNode(LifecycleNode):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.settings: ExecutorSettings | None = None
        self.core: ExecutorCore | None = None
        self.worker: NetworkWorker | None = None
        self.control_loop: ControlLoop | None = None
        self.status_loop: ControlLoop | None = None
        self.link: RosServerLink | None = None
        self.sensors: SensorNode | None = None
        self.goal_server: GoalServer | None = None
        # Made by the configure transition (read_settings, create_entities), None until then.
        self.robot: RobotDeclaration | None = None
        self.output = None  # the output mode's OutputMode
        self.command_pub = None
        self.control_period_s = 0.0
        self.status_pub = None
        self.diagnostics_pub = None
        self._entities: list = []
        self.transition_failure = ""
        self._declare_problem = ""
        try:
            settings = declare_settings(self, ExecutorSettings, **self._settings_context())
        except NodeStartupError as error:
            settings, self._declare_problem = None, str(error)
        if settings is not None and settings.handshake_only:
            self.settings = settings
            self._check_only()
        self.lifecycle = ExecutorLifecycle(self)
        # rclpy's label, kept by the transition callbacks below
        self.lifecycle_state = "unconfigured"
        self.goal_steps = GoalSteps(self.get_logger().info, self._status_now)
        self.goal_server = GoalServer(
            self, self.goal_steps, lambda: (self.lifecycle.active, self.lifecycle_state)
        )

    def _settings_context(self) -> dict:
        return {"node_namespace": self.get_namespace(), "hostname": socket.gethostname()}

    # ---- lifecycle transitions (lifecycle.py decides what, these do it) ----

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("configure", self.lifecycle.configure)

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("activate", self.lifecycle.activate)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("deactivate", self.lifecycle.deactivate)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(
            "cleanup", self.lifecycle.cleanup, failure=TransitionCallbackReturn.ERROR
        )

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition(
            "shutdown", self.lifecycle.shutdown, failure=TransitionCallbackReturn.ERROR
        )

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        # Whatever failed, nothing stays acquired; the node is unconfigured again.
        self._transition("release after an error", self.lifecycle.release)
        return TransitionCallbackReturn.SUCCESS

    def _transition(
        self,
        name: str,
        step: Callable[[], TransitionOutcome],
        failure: TransitionCallbackReturn = TransitionCallbackReturn.FAILURE,
    ) -> TransitionCallbackReturn:
        # Our own record of the state: rclpy's is private (LifecycleNode._state_machine).
        during, done, failed = STATE_LABELS[name]
        self.lifecycle_state = during
        outcome = step()
        self.lifecycle_state = done if outcome.ok else failed
        if outcome.ok:
            self.transition_failure = ""
            self.get_logger().info(f"{name}: {outcome.reason}")
            return TransitionCallbackReturn.SUCCESS
        self.transition_failure = outcome.reason
        self.get_logger().error(f"{name} failed: {outcome.reason}")
        return failure

    # ---- lifecycle.ExecutorParts ---------------------------------------

    def read_settings(self) -> None:
        if self._declare_problem:
            raise TransitionFailed(self._declare_problem)
        try:
            self.settings = read_settings(self, **self._settings_context())
        except NodeStartupError as error:
            raise TransitionFailed(str(error)) from error
        self.robot = RobotDeclaration(
            self.settings.mapping.policy_names, self.settings.camera_names, self.settings.state_dim
        )
        if self.settings.require_joint_limits and not self.settings.joint_lower_limits:
            self.settings = required_limits(self, self.settings)

    def connect(self) -> None:
        settings, now = self.settings, time.monotonic()
        self.core = core = ExecutorCore(settings, now)
        self.goal_steps.attach(core, settings)
        self.goal_steps.recover = self._recover
        accept_runtime_parameters(self, core, configuring=lambda: self.core is None)
        if settings.wait_for_goal:
            core.pause(now, HOLD_GOAL)
        self.link = RosServerLink(self, settings, core)
        # configured through the lifecycle service: the executor spins the node
        if self.executor is not None:
            self.link.mark_spinning()
        # before any command entity exists
        result = handshake(core, self.link, self.robot, time.monotonic)
        if not result.accepted:
            report(result.as_dict())
            raise TransitionFailed(f"handshake refused: {result.reason}")
        session = core.identity
        report(
            result.as_dict()
            | {
                "session_id": session.session_id,
                "client_id": settings.client_id,
                "rtc_enabled": session.rtc_active,
            }
        )
        for warning in timing_warnings(
            settings,
            session.chunk_size,
            replace_mode=session.rtc_active,
            threshold_s=core.request_threshold_s,
        ):
            self.get_logger().warning(warning)

    def create_entities(self) -> None:
        self._create_robot_io()
        # Server side: heartbeat watchdog of every replica, discovered ones included (the link
        # owns them; the data plane was created by the handshake).
        self.link.watch_heartbeats(self.on_heartbeat)
        self._create_operator_interface()

    def _create_robot_io(self) -> None:
        """Sensors read when a request needs them (sensor_node.py: why), commands out."""
        settings, keep = self.settings, self._entities.append
        self.sensors = sensors = SensorNode(self)
        cameras = {
            name: sensors.subscribe(
                CompressedImage if transport == "compressed" else Image, topic, SENSOR_QOS
            )
            for name, topic, transport in zip(
                settings.camera_names,
                settings.camera_topics,
                settings.camera_transports,
                strict=False,
            )
        }
        self.core.pull_sensors(
            joint_state=sensors.subscribe(JointState, settings.state_topic, SENSOR_QOS),
            cameras=cameras,
        )
        self.output = OUTPUT_MODES[settings.output_mode]
        # A plain publisher, not a lifecycle one: an inactive executor still commands its hold.
        self.command_pub = self.create_publisher(
            self.output.message_type, settings.output_topic, COMMAND_QOS
        )
        keep(self.command_pub)
        self.control_period_s = 1.0 / settings.command_rate_hz

    def _create_operator_interface(self) -> None:
        """The operator's services (pause, resume, reset) and the status thread's publishers."""
        keep = self._entities.append
        keep(self.create_service(Trigger, "~/pause", self.on_pause))
        keep(self.create_service(Trigger, "~/resume", self.on_resume))
        # Its own group: it awaits the server's answer, and must not hold up the timers meanwhile.
        keep(
            self.create_service(
                Trigger,
                "~/reset_episode",
                self.on_reset_episode,
                callback_group=MutuallyExclusiveCallbackGroup(),
            )
        )
        self.status_pub = self.create_publisher(ExecutorStatus, "~/status", STATUS_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        keep(self.status_pub)
        keep(self.diagnostics_pub)
        report = StatusReport(
            self, self.core, self.goal_steps, self.status_pub, self.diagnostics_pub
        )
        # On a thread of its own (control_loop.py: why); stopped before the publishers go.
        self.status_loop = ControlLoop(
            1.0 / self.settings.status_period_s,
            lambda now_s: report.publish(),
            self.on_status_error,
            name="lerobot_ros_status",
        )
        self.status_loop.start()

    def start_streaming(self) -> None:
        settings = self.settings
        self.link.mark_spinning()
        self.worker = NetworkWorker(self.core, self.link, self.robot, log=self.get_logger().info)
        self.worker.start()
        # a warm standby (hedging.py), rebalancing
        if settings.is_fleet and not settings.handshake_only:
            self.link.keep_fleet(self.robot, self.get_logger().info)
        # A thread waiting for the GIL gets it only after the switch interval (5 ms by
        # default, longer than a 250 Hz period): hand it over within a tenth of a period.
        sys.setswitchinterval(min(sys.getswitchinterval(), self.control_period_s / 10))
        self.control_loop = ControlLoop(
            settings.command_rate_hz, self.on_control_tick, self.on_control_error
        )
        self.control_loop.start()
        session = self.core.identity
        self.get_logger().info(
            f"streaming {settings.output_mode} on {self.command_pub.topic_name} at "
            f"{settings.command_rate_hz:g} Hz "
            f"(policy {settings.fps:g} Hz) "
            f"as client {settings.client_id} (session {session.session_id}, rtc "
            f"{session.rtc_active})"
            + (": holding until a RunPolicy goal" if settings.wait_for_goal else "")
        )

    def hold(self) -> None:
        self.core.pause(time.monotonic(), HOLD_LIFECYCLE)
        self.goal_steps.cancel(None, "the executor was deactivated")

    def close_session(self) -> None:
        session_id = self.core.end_session()
        self.link.end_standby()
        if not session_id:
            return
        answer = self.link.session.close_session(session_id, CLOSE_TIMEOUT_S)
        outcome = answer if isinstance(answer, str) else answer.message
        self.get_logger().info(f"session {session_id} closed ({outcome or 'ok'})")

    def resume(self) -> None:
        # OFFLINE or DEAD: a handshake now, or a failed activate with the reason
        if self.core.offline.holding:
            problem = self._recover("lifecycle activate")
            if problem:
                raise TransitionFailed(problem)
            self.core.resume(time.monotonic(), HOLD_LIFECYCLE)
            return
        now = time.monotonic()
        self.core.reopen(now, "activated again: opening a new session")
        self.core.resume(now, HOLD_LIFECYCLE)

    def _recover(self, by: str) -> str | None:
        """An explicit resume from OFFLINE (or DEAD): ``recovery.resume`` with this node's
        handshake."""
        core = self.core
        if core is None:
            return None
        return recovery.resume(
            core,
            lambda: handshake(core, self.link, self.robot, time.monotonic),
            time.monotonic,
            by,
        )

    def stop_streaming(self) -> None:
        # Never destroy entities under a running worker or control loop.
        if self.control_loop is not None:
            self.control_loop.stop()
            self.control_loop.join(timeout=CONTROL_JOIN_TIMEOUT_S)
        if self.worker is not None:
            self.worker.stop()
            self.worker.join(timeout=WORKER_JOIN_TIMEOUT_S)
        if self.link is not None:
            self.link.stop_fleet_threads()
        self.control_loop = self.worker = None

    def destroy_entities(self) -> None:
        # Through the node's destroy_*: they also take the entity's event handlers out of the
        # executor's wait set (entity.destroy() alone leaves them there, and the next wait fails).
        destroyers = {
            Subscription: self.destroy_subscription,
            Publisher: self.destroy_publisher,
            Service: self.destroy_service,
            Timer: self.destroy_timer,
        }
        self._stop_status()
        self._destroy_sensors()
        for entity in reversed(self._entities):
            destroyers[next(kind for kind in destroyers if isinstance(entity, kind))](entity)
        self._entities.clear()
        if self.link is not None:
            self.link.destroy()

    def _stop_status(self) -> None:
        status_loop = self.status_loop
        if status_loop is not None:
            status_loop.stop()
            status_loop.join(timeout=CONTROL_JOIN_TIMEOUT_S)
            self.status_loop = None

    def _destroy_sensors(self) -> None:
        sensors = self.sensors
        if sensors is not None:
            sensors.destroy()
            self.sensors = None

    def forget_settings(self) -> None:
        self.goal_steps.attach(None, None)
        self.core = self.link = None

    # ---- start-up -------------------------------------------------------

    def _check_only(self) -> None:
        """handshake_only: get_status and the contract check, then exit (0 accepted, 1 refused)."""
        robot = RobotDeclaration(
            self.settings.mapping.policy_names, self.settings.camera_names, self.settings.state_dim
        )
        namespace = (
            self.settings.replicas[0] if self.settings.replicas else self.settings.server_namespace
        )
        session = SessionClient(self, namespace, self.settings.client_id)
        view = session.get_status(self.settings.handshake_timeout_s)
        if isinstance(view, str):
            self._refuse(view)
        result = check_server(robot, view.capabilities, view.ready, view.instance_id)
        if not result.accepted:
            self._refuse(result.reason, result)
        report(result.as_dict())
        raise NodeDone

    def _refuse(self, reason: str, result: HandshakeResult | None = None) -> None:
        report((result or HandshakeResult(False, reason)).as_dict())
        raise NodeStartupError(f"handshake refused: {reason}")

    # ---- callbacks ------------------------------------------------------

    def on_control_tick(self, now_s: float) -> None:
        """On the control loop's thread: the core's command for this tick, published."""
        action = self.core.control_tick(now_s)
        if action is not None:
            stamp = self.get_clock().now().to_msg()
            self.command_pub.publish(
                self.output.build(self.settings.joint_names, action, self.control_period_s, stamp)
            )

    def on_control_error(self, error: BaseException) -> None:
        self.get_logger().error(f"control tick failed: {error!r}", throttle_duration_sec=1.0)

    def on_heartbeat(self, namespace: str, msg: ServerStatus) -> None:
        self.core.on_heartbeat(
            control_plane.server_health_from_msg(msg), time.monotonic(), namespace
        )

    def on_pause(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.core.pause(time.monotonic())
        response.success, response.message = (
            True,
            "paused: holding position; the offline budget is not spent",
        )
        return response

    def on_resume(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Let go of the operator's pause; from OFFLINE, restart motion (a handshake first when
        needed)."""
        self.core.resume(time.monotonic())
        problem = self._recover("~/resume")
        response.success = problem is None
        response.message = (
            "resumed" if problem is None else f"not resumed, still holding: {problem}"
        )
        return response

    async def on_reset_episode(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        """Clear the queue and bump the episode at once, then tell the server (bounded wait)."""
        session_id, episode = self.core.reset_episode()
        self._status_now()
        answer = await self.link.session.reset_episode_async(session_id, episode, RESET_TIMEOUT_S)
        if answer is None:
            response.success = False
            response.message = (
                f"episode {episode} started locally; the server did not answer "
                f"within {RESET_TIMEOUT_S:g} s"
            )
        else:
            response.success = answer.success
            response.message = f"episode {episode}: server says " + (answer.message or "ok")
        return response

    def on_status_error(self, error: BaseException) -> None:
        self.get_logger().error(
            f"status publishing failed: {type(error).__name__}: {error}", throttle_duration_sec=5.0
        )

    def _status_now(self) -> None:
        """Publish ~/status at once (a goal started or ended, the episode changed), from the status
        thread."""
        status_loop = self.status_loop
        if status_loop is not None:
            status_loop.wake()

    # ---- shutdown -------------------------------------------------------

    def destroy_node(self) -> None:
        # Also reached without a drain: never destroy entities under a running worker or control
        # loop.
        self.stop_streaming()
        if self.link is not None:
            self.link.stop_discovery()  # its thread reads the graph: it ends before the node does
        # The status thread must end before the interpreter does: finalization kills a thread
        # inside rclpy at its next GIL take, and that ends in std::terminate (exit -6).
        self._stop_status()
        self._destroy_sensors()
        # None when handshake_only ended the constructor before the goal server existed.
        if self.goal_server is not None:
            self.goal_server.destroy()
        super().destroy_node()

    def drain(self, spin_once) -> None:
        """SIGINT/SIGTERM: stop the network worker, then close the session (bounded)."""
        if self.worker is not None:
            self.worker.stop()
            deadline = time.monotonic() + WORKER_JOIN_TIMEOUT_S
            while self.worker.is_alive() and time.monotonic() < deadline:
                spin_once()  # a re-handshake in progress waits on futures the executor completes
        if self.link is not None:
            self.link.stop_fleet_threads()
        if self.core is None or not self.lifecycle.session_open:
            return
        self.link.end_standby()
        session_id = self.core.identity.session_id
        if not session_id:
            return
        answer = self.link.session.close_session(session_id, CLOSE_TIMEOUT_S, spin_once=spin_once)
        outcome = answer if isinstance(answer, str) else answer.message
        self.get_logger().info(f"session {session_id} closed ({outcome or 'ok'})")


def make_node() -> ChunkExecutorNode:
    return run_autostart(ChunkExecutorNode())


def main(args: list[str] | None = None) -> None:
    sys.exit(
        run_node(
            make_node,
            args,
            make_executor=lambda: MultiThreadedExecutor(num_threads=EXECUTOR_THREADS),
        )
    )


if __name__ == "__main__":
    main()
