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
RunPolicy goals (``goals.py``) run the policy for one task.

ROS entities (``~`` is the node's name, default chunk_executor):
  <state_topic>                          sensor_msgs/JointState (sub, on _<name>_sensors: read when needed; by joint name)
  <camera_topics[i]>                     sensor_msgs/Image or CompressedImage (sub, on _<name>_sensors: read when needed)
  <output_topic>                         Float64MultiArray | JointTrajectory | JointState (pub, at control_rate_hz)
  ~/status                               lerobot_ros/ExecutorStatus (pub, every status_period_s, and at once
                                         when a goal starts or ends or the episode changes)
  /diagnostics                           diagnostic_msgs/DiagnosticArray (pub, every second)
  ~/pause, ~/resume, ~/reset_episode     std_srvs/Trigger (services)
  ~/run_policy                           lerobot_ros/RunPolicy (action server)
  ~/start_policy, ~/stop_policy          lerobot_ros/StartPolicy, StopPolicy (the action's mirror services)
  ~/change_state, ~/get_state, ...       lifecycle_msgs (rclpy's lifecycle services)
  <replica>/status                       lerobot_ros/ServerStatus (sub, per replica; heartbeat watchdog, drains)
  <replica>/get_status, open_session, close_session, reset_episode   (service clients, per replica)
  <server>/clients/<client_id>/observation, action_chunk   (pub/sub, the session's data plane)

Threads: the control loop (``control_loop.ControlLoop``, absolute deadlines)
ticks the core and publishes each command; nothing spins the joint-state
and camera subscriptions, on a hidden companion node ``_<name>_sensors``:
their newest sample is taken from the middleware when a request (or a hold)
needs it (``sensor_node.py``: why); ~/status and a goal's feedback are
published every status_period_s, and /diagnostics every second, by a thread
of their own (a ``ControlLoop``); a MultiThreadedExecutor spins the other
callbacks above: chunks, heartbeat, the operator and lifecycle services in the node's one
mutually exclusive group (one at a time, as before), the server's service
answers in their own group (so a transition can wait for them), goals in a
reentrant group; the network worker thread (``worker.NetworkWorker``) sends
one observation at a time and waits for its chunk. The control loop never
waits on a callback, never does network I/O and never blocks.

joint_trajectory mode publishes one single-point trajectory per control tick
(``time_from_start`` = one control period), not the queued chunk as one timed trajectory:
every point passes the same fail-safe tick and safety envelope as the other
modes, so a controller never keeps playing actions that went stale, or that
the operator paused, after the executor decided so (see output_modes.py).
"""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import threading
import time
import uuid

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.executors import MultiThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.publisher import Publisher
from rclpy.service import Service
from rclpy.subscription import Subscription
from rclpy.timer import Timer
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_srvs.srv import Trigger

from lerobot_ros import names
from lerobot_ros.wire import control_plane
from lerobot_ros.action import RunPolicy
from lerobot_ros.executor.control_loop import ControlLoop
from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.goals import GoalBook, GoalRequest, GoalResult, Progress, Termination
from lerobot_ros.executor.handshake import HandshakeResult, check_server, handshake
from lerobot_ros.executor.handshake_types import RobotDeclaration
from lerobot_ros.executor.lifecycle import ExecutorLifecycle, TransitionOutcome
from lerobot_ros.executor.runtime_parameters import accept_runtime_parameters
from lerobot_ros.executor.sensor_node import SensorNode
from lerobot_ros.executor.server_link import RosServerLink
from lerobot_ros.executor.session_client import SessionClient
from lerobot_ros.executor.settings import ExecutorSettings, timing_warnings
from lerobot_ros.executor.state_machine import ExecutorState
from lerobot_ros.executor.worker import NetworkWorker
from lerobot_ros.msg import ExecutorStatus, ServerStatus
from lerobot_ros.node_support import (NodeDone, NodeStartupError, TransitionFailed, declare_settings, read_settings,
                                     run_autostart, run_node)
from lerobot_ros.wire.output_modes import OUTPUT_MODES
from lerobot_ros.qos import COMMAND_QOS, SENSOR_QOS, STATUS_QOS
from lerobot_ros.srv import StartPolicy, StopPolicy
from lerobot_ros.telemetry import DIAGNOSTICS_PERIOD_S

NODE_NAME = "chunk_executor"

CLOSE_TIMEOUT_S = 2.0
RESET_TIMEOUT_S = 2.0
WORKER_JOIN_TIMEOUT_S = 3.0
CONTROL_JOIN_TIMEOUT_S = 1.0
#: How often a goal's waiter looks at its cancel request (seconds).
GOAL_POLL_S = 0.05
#: Threads of the executor: the node's group, the server's answers, a goal and its preemptor.
EXECUTOR_THREADS = 4

#: The names the core's holds go by (core.pause / resume).
HOLD_LIFECYCLE, HOLD_GOAL = "lifecycle", "goal"


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
        self.goals = GoalBook()
        self._goal_lock = threading.RLock()  # a goal's start and end, with what they do to the robot
        self._goal_handles: dict = {}  # goal id -> its action goal handle (StartPolicy goals have none)
        goal_group = ReentrantCallbackGroup()
        self._action_server = ActionServer(
            self, RunPolicy, "~/run_policy", self.execute_goal, goal_callback=self.on_goal_request,
            cancel_callback=lambda goal_handle: CancelResponse.ACCEPT, callback_group=goal_group)
        self.create_service(StartPolicy, "~/start_policy", self.on_start_policy, callback_group=goal_group)
        self.create_service(StopPolicy, "~/stop_policy", self.on_stop_policy, callback_group=goal_group)

    def _settings_context(self) -> dict:
        return {"node_namespace": self.get_namespace(), "hostname": socket.gethostname()}

    # ---- lifecycle transitions (lifecycle.py decides what, these do it) ----

    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("configure", self.lifecycle.configure())

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("activate", self.lifecycle.activate())

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("deactivate", self.lifecycle.deactivate())

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("cleanup", self.lifecycle.cleanup(), failure=TransitionCallbackReturn.ERROR)

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        return self._transition("shutdown", self.lifecycle.shutdown(), failure=TransitionCallbackReturn.ERROR)

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        # Whatever failed, nothing stays acquired; the node is unconfigured again.
        self._transition("release after an error", self.lifecycle.release())
        return TransitionCallbackReturn.SUCCESS

    def _transition(self, name: str, outcome: TransitionOutcome,
                    failure: TransitionCallbackReturn = TransitionCallbackReturn.FAILURE) -> TransitionCallbackReturn:
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
        self.robot = RobotDeclaration(self.settings.joint_names, self.settings.camera_names, self.settings.state_dim)

    def connect(self) -> None:
        settings, now = self.settings, time.monotonic()
        self.core = core = ExecutorCore(settings, now)
        accept_runtime_parameters(self, core, configuring=lambda: self.core is None)
        if settings.wait_for_goal:
            core.pause(now, HOLD_GOAL)
        self.link = RosServerLink(self, settings, core)
        if self.executor is not None:  # configured through the lifecycle service: the executor spins the node
            self.link.mark_spinning()
        result = handshake(core, self.link, self.robot, time.monotonic)  # before any command entity exists
        if not result.accepted:
            report(result.as_dict())
            raise TransitionFailed(f"handshake refused: {result.reason}")
        session = core.identity
        report(result.as_dict() | {"session_id": session.session_id, "client_id": settings.client_id,
                                   "rtc_enabled": session.rtc_active})
        for warning in timing_warnings(settings, session.chunk_size, replace_mode=session.rtc_active,
                                       threshold_s=core.request_threshold_s):
            self.get_logger().warning(warning)

    def create_entities(self) -> None:
        settings, core, keep = self.settings, self.core, self._entities.append
        # Robot side: sensors read when a request needs them (sensor_node.py: why), commands out.
        self.sensors = sensors = SensorNode(self)
        cameras = {
            name: sensors.subscribe(CompressedImage if transport == "compressed" else Image, topic, SENSOR_QOS)
            for name, topic, transport in zip(settings.camera_names, settings.camera_topics, settings.camera_transports)
        }
        core.pull_sensors(joint_state=sensors.subscribe(JointState, settings.state_topic, SENSOR_QOS), cameras=cameras)
        self.output = OUTPUT_MODES[settings.output_mode]
        # A plain publisher, not a lifecycle one: an inactive executor still commands its hold.
        self.command_pub = self.create_publisher(self.output.message_type, settings.output_topic, COMMAND_QOS)
        keep(self.command_pub)
        self.control_period_s = 1.0 / settings.command_rate_hz

        # Server side: heartbeat watchdog of every replica (the data plane was created by the handshake).
        for namespace in settings.replicas:
            keep(self.create_subscription(
                ServerStatus, names.in_namespace(namespace, names.STATUS),
                lambda msg, namespace=namespace: self.on_heartbeat(namespace, msg), STATUS_QOS))

        # Operator and telemetry.
        keep(self.create_service(Trigger, "~/pause", self.on_pause))
        keep(self.create_service(Trigger, "~/resume", self.on_resume))
        # Its own group: it awaits the server's answer, and must not hold up the timers meanwhile.
        keep(self.create_service(Trigger, "~/reset_episode", self.on_reset_episode,
                                 callback_group=MutuallyExclusiveCallbackGroup()))
        self.status_pub = self.create_publisher(ExecutorStatus, "~/status", STATUS_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        keep(self.status_pub)
        keep(self.diagnostics_pub)
        self._diagnostics_due = 0.0
        # On a thread of its own (control_loop.py: why); stopped before the publishers go.
        self.status_loop = ControlLoop(1.0 / settings.status_period_s, lambda now_s: self.on_status(),
                                       self.on_status_error, name="lerobot_ros_status")
        self.status_loop.start()
        self._transitions_logged = 0
        self._rejections_logged = 0

    def start_streaming(self) -> None:
        settings = self.settings
        self.link.mark_spinning()
        self.worker = NetworkWorker(self.core, self.link, self.robot, log=self.get_logger().info)
        self.worker.start()
        # A thread waiting for the GIL gets it only after the switch interval (5 ms by
        # default, longer than a 250 Hz period): hand it over within a tenth of a period.
        sys.setswitchinterval(min(sys.getswitchinterval(), self.control_period_s / 10))
        self.control_loop = ControlLoop(settings.command_rate_hz, self.on_control_tick, self.on_control_error)
        self.control_loop.start()
        session = self.core.identity
        self.get_logger().info(
            f"streaming {settings.output_mode} on {self.command_pub.topic_name} at {settings.command_rate_hz:g} Hz "
            f"(policy {settings.fps:g} Hz) "
            f"as client {settings.client_id} (session {session.session_id}, rtc {session.rtc_active})"
            + (": holding until a RunPolicy goal" if settings.wait_for_goal else "")
        )

    def hold(self) -> None:
        now = time.monotonic()
        self.core.pause(now, HOLD_LIFECYCLE)
        with self._goal_lock:
            ended = self.goals.cancel(self._progress(now), reason="the executor was deactivated")
            if ended is not None:
                self._goal_ended(ended)

    def close_session(self) -> None:
        session_id = self.core.end_session()
        if not session_id:
            return
        answer = self.link.session.close_session(session_id, CLOSE_TIMEOUT_S)
        outcome = answer if isinstance(answer, str) else answer.message
        self.get_logger().info(f"session {session_id} closed ({outcome or 'ok'})")

    def resume(self) -> None:
        now = time.monotonic()
        self.core.reopen(now, "activated again: opening a new session")
        self.core.resume(now, HOLD_LIFECYCLE)

    def stop_streaming(self) -> None:
        # Never destroy entities under a running worker or control loop.
        if self.control_loop is not None:
            self.control_loop.stop()
            self.control_loop.join(timeout=CONTROL_JOIN_TIMEOUT_S)
        if self.worker is not None:
            self.worker.stop()
            self.worker.join(timeout=WORKER_JOIN_TIMEOUT_S)
        self.control_loop = self.worker = None

    def destroy_entities(self) -> None:
        # Through the node's destroy_*: they also take the entity's event handlers out of the
        # executor's wait set (entity.destroy() alone leaves them there, and the next wait fails).
        destroyers = {Subscription: self.destroy_subscription, Publisher: self.destroy_publisher,
                      Service: self.destroy_service, Timer: self.destroy_timer}
        self._stop_status()
        self._destroy_sensors()
        for entity in reversed(self._entities):
            destroyers[next(kind for kind in destroyers if isinstance(entity, kind))](entity)
        self._entities.clear()
        if self.link is not None:
            self.link.destroy()

    def _stop_status(self) -> None:
        status_loop = getattr(self, "status_loop", None)  # absent when the constructor failed
        if status_loop is not None:
            status_loop.stop()
            status_loop.join(timeout=CONTROL_JOIN_TIMEOUT_S)
            self.status_loop = None

    def _destroy_sensors(self) -> None:
        sensors = getattr(self, "sensors", None)  # absent when the constructor failed
        if sensors is not None:
            sensors.destroy()
            self.sensors = None

    def forget_settings(self) -> None:
        self.core = self.link = None

    # ---- start-up -------------------------------------------------------

    def _check_only(self) -> None:
        """handshake_only: get_status and the contract check, then exit (0 accepted, 1 refused)."""
        robot = RobotDeclaration(self.settings.joint_names, self.settings.camera_names, self.settings.state_dim)
        session = SessionClient(self, self.settings.replicas[0], self.settings.client_id)
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

    # ---- goals (goals.py keeps the book; these apply it to the robot) -----

    def _progress(self, now: float) -> Progress:
        return Progress.of(self.core.snapshot(now), now)

    def _goal_problem(self, request: GoalRequest) -> str | None:
        if not self.lifecycle.active:
            return f"the executor is {self._state_machine.current_state[1]}, not active: activate it first"
        return request.problem()

    def _start_goal(self, goal_id: str, request: GoalRequest) -> str | None:
        """Make ``goal_id`` the active goal (the old one ends as preempted); the refusal, if any."""
        with self._goal_lock:
            problem = self._goal_problem(request)
            if problem:
                return problem
            now = time.monotonic()
            preempted = self.goals.start(goal_id, request, self._progress(now))
            if preempted is not None:
                self._goal_handles.pop(preempted.goal_id, None)
                self.get_logger().info(f"goal {preempted.goal_id}: {preempted.termination.value} ({preempted.reason})")
            self.core.set_task(request.task)
            self.core.clear_queue()  # what is queued was planned for the previous goal (or none)
            if request.new_episode:
                # The server moves the session's episode with the first observation that names it.
                self.core.reset_episode()
            if self.core.holds(HOLD_GOAL):
                self.core.resume(now, HOLD_GOAL)
                # Held, the session may have gone idle on the server: start the goal on a fresh one.
                self.core.reopen(now, f"goal {goal_id} started: opening a fresh session")
            self.get_logger().info(f"goal {goal_id} started: task {request.task!r}, max_duration_s "
                                   f"{request.max_duration_s:g}, new_episode {request.new_episode}")
            self._status_now()
            return None

    def _end_goal(self, goal_id: str | None, reason: str) -> GoalResult | None:
        """Cancel the active goal (``goal_id``'s only, when given): hold, end the episode."""
        with self._goal_lock:
            if self.core is None:
                return None
            result = self.goals.cancel(self._progress(time.monotonic()), goal_id, reason)
            if result is not None:
                self._goal_ended(result)
            return result

    def _goal_ended(self, result: GoalResult) -> None:
        """What a goal's end does to the robot (under the goal lock)."""
        now = time.monotonic()
        self._goal_handles.pop(result.goal_id, None)
        self.core.set_task(self.settings.task)
        self.core.clear_queue()  # planned for this goal: never played for the next one
        if self.settings.wait_for_goal:
            self.core.pause(now, HOLD_GOAL)
        if result.termination is Termination.CANCELLED:
            self.core.reset_episode()
        self.get_logger().info(f"goal {result.goal_id}: {result.termination.value} ({result.reason}); "
                               f"{result.commands_published} commands, {result.chunks_merged} chunks merged")
        self._status_now()

    def on_goal_request(self, goal: RunPolicy.Goal) -> GoalResponse:
        problem = self._goal_problem(goal_request_of(goal))
        if problem:
            self.get_logger().warning(f"RunPolicy goal rejected: {problem}")
            return GoalResponse.REJECT
        return GoalResponse.ACCEPT

    def execute_goal(self, goal_handle) -> RunPolicy.Result:
        goal_id = uuid.UUID(bytes=bytes(goal_handle.goal_id.uuid)).hex
        with self._goal_lock:
            problem = self._start_goal(goal_id, goal_request_of(goal_handle.request))
            if problem is None:
                self._goal_handles[goal_id] = goal_handle
        if problem:
            goal_handle.abort()
            return RunPolicy.Result(termination=Termination.FAILED.value, reason=problem)
        result = None
        while result is None:
            result = self.goals.wait_ended(goal_id, GOAL_POLL_S)
            if result is None and goal_handle.is_cancel_requested:
                result = self._end_goal(goal_id, "cancelled") or self.goals.result(goal_id)
        if result.termination is Termination.CANCELLED and goal_handle.is_cancel_requested:
            goal_handle.canceled()
        elif result.termination is Termination.COMPLETED:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        return RunPolicy.Result(termination=result.termination.value, reason=result.reason,
                                duration_s=result.duration_s, commands_published=result.commands_published,
                                requests_sent=result.requests_sent, chunks_merged=result.chunks_merged,
                                episode=result.episode)

    def on_start_policy(self, request: StartPolicy.Request, response: StartPolicy.Response) -> StartPolicy.Response:
        goal_id = uuid.uuid4().hex
        problem = self._start_goal(goal_id, GoalRequest(request.task, request.max_duration_s, request.new_episode))
        response.accepted, response.message = problem is None, problem or f"goal {goal_id} started"
        response.goal_id = goal_id if problem is None else ""
        return response

    def on_stop_policy(self, request: StopPolicy.Request, response: StopPolicy.Response) -> StopPolicy.Response:
        result = self._end_goal(None, "stopped by stop_policy")
        if result is None:
            response.success, response.message = False, "no goal was running"
            return response
        response.success, response.message = True, result.reason
        response.goal_id, response.termination = result.goal_id, result.termination.value
        response.duration_s, response.commands_published = result.duration_s, result.commands_published
        response.requests_sent, response.chunks_merged = result.requests_sent, result.chunks_merged
        response.episode = result.episode
        return response

    # ---- callbacks ------------------------------------------------------

    def on_control_tick(self, now_s: float) -> None:
        """On the control loop's thread: the core's command for this tick, published."""
        action = self.core.control_tick(now_s)
        if action is not None:
            stamp = self.get_clock().now().to_msg()
            self.command_pub.publish(self.output.build(self.settings.joint_names, action, self.control_period_s, stamp))

    def on_control_error(self, error: BaseException) -> None:
        self.get_logger().error(f"control tick failed: {error!r}", throttle_duration_sec=1.0)

    def on_heartbeat(self, namespace: str, msg: ServerStatus) -> None:
        self.core.on_heartbeat(msg.instance_id, time.monotonic(), namespace, msg.draining)

    def on_pause(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.core.pause(time.monotonic())
        response.success, response.message = True, "paused: holding position; the offline budget is not spent"
        return response

    def on_resume(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        self.core.resume(time.monotonic())
        response.success, response.message = True, "resumed"
        return response

    async def on_reset_episode(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Clear the queue and bump the episode at once, then tell the server (bounded wait)."""
        session_id, episode = self.core.reset_episode()
        self._status_now()
        answer = await self.link.session.reset_episode_async(session_id, episode, RESET_TIMEOUT_S)
        if answer is None:
            response.success = False
            response.message = f"episode {episode} started locally; the server did not answer within {RESET_TIMEOUT_S:g} s"
        else:
            response.success = answer.success
            response.message = f"episode {episode}: server says " + (answer.message or "ok")
        return response

    def on_status_error(self, error: BaseException) -> None:
        self.get_logger().error(f"status publishing failed: {type(error).__name__}: {error}",
                                throttle_duration_sec=5.0)

    def _status_now(self) -> None:
        """Publish ~/status at once (a goal started or ended, the episode changed), from the status thread."""
        status_loop = self.status_loop
        if status_loop is not None:
            status_loop.wake()

    def on_status(self) -> None:
        now = time.monotonic()
        snapshot = self.core.snapshot(now)
        self._follow_goal(Progress.of(snapshot, now))
        # Read after the goal is followed: a goal that just ended is in this status.
        telemetry = dataclasses.replace(snapshot.telemetry, **self.goals.telemetry())
        stamp = self.get_clock().now().to_msg()
        self.status_pub.publish(control_plane.executor_status_to_msg(telemetry, stamp))
        if now >= self._diagnostics_due:  # every DIAGNOSTICS_PERIOD_S, not at the status rate
            self._diagnostics_due = now + DIAGNOSTICS_PERIOD_S
            diagnostics = DiagnosticArray(
                status=[control_plane.executor_diagnostic(f"{self.get_name()}: chunk executor", telemetry)])
            diagnostics.header.stamp = stamp
            self.diagnostics_pub.publish(diagnostics)
        self._log_transitions()
        if telemetry.request_rejections > self._rejections_logged:
            self._rejections_logged = telemetry.request_rejections
            self.get_logger().warning(
                f"the server refused a request ({telemetry.request_rejections} so far): "
                f"{telemetry.last_rejection_reason}", throttle_duration_sec=5.0)

    def _follow_goal(self, progress: Progress) -> None:
        """End the active goal when it is over, else send its feedback (the same snapshot as ~/status)."""
        with self._goal_lock:
            ended = self.goals.evaluate(progress)
            if ended is not None:
                self._goal_ended(ended)
                return
            feedback, goal = self.goals.feedback(progress), self.goals.active
            handle = self._goal_handles.get(goal.goal_id) if goal is not None else None
        if handle is not None and feedback is not None:
            handle.publish_feedback(RunPolicy.Feedback(
                state=feedback.state, state_name=feedback.state_name, queue_depth=feedback.queue_depth,
                commands_published=feedback.commands_published, latency_ms_p95=feedback.latency_ms_p95,
                episode=feedback.episode, elapsed_s=feedback.elapsed_s))

    def _log_transitions(self) -> None:
        transitions, self._transitions_logged = self.core.transitions_since(self._transitions_logged)
        for transition in transitions:
            text = f"{transition.from_state.name} -> {transition.to_state.name}: {transition.reason}"
            # Recoveries are news, not trouble: a saturated link flips STALLED <->
            # STREAMING every chunk, and only the first half deserves a warning.
            # (rclpy refuses one call site logging at two severities: one call each.)
            if transition.to_state is ExecutorState.DEAD:
                self.get_logger().error(text)
            elif transition.to_state is ExecutorState.STREAMING:
                self.get_logger().info(text)
            else:
                self.get_logger().warning(text)

    # ---- shutdown -------------------------------------------------------

    def destroy_node(self) -> None:
        # Also reached without a drain: never destroy entities under a running worker or control loop.
        self.stop_streaming()
        # The status thread must end before the interpreter does: finalization kills a thread
        # inside rclpy at its next GIL take, and that ends in std::terminate (exit -6).
        self._stop_status()
        self._destroy_sensors()
        action_server = getattr(self, "_action_server", None)  # absent when the constructor failed
        if action_server is not None:
            action_server.destroy()
        super().destroy_node()

    def drain(self, spin_once) -> None:
        """SIGINT/SIGTERM: stop the network worker, then close the session (bounded)."""
        if self.worker is not None:
            self.worker.stop()
            deadline = time.monotonic() + WORKER_JOIN_TIMEOUT_S
            while self.worker.is_alive() and time.monotonic() < deadline:
                spin_once()  # a re-handshake in progress waits on futures the executor completes
        if self.core is None or not self.lifecycle.session_open:
            return
        session_id = self.core.identity.session_id
        if not session_id:
            return
        answer = self.link.session.close_session(session_id, CLOSE_TIMEOUT_S, spin_once=spin_once)
        outcome = answer if isinstance(answer, str) else answer.message
        self.get_logger().info(f"session {session_id} closed ({outcome or 'ok'})")


def goal_request_of(goal: RunPolicy.Goal) -> GoalRequest:
    return GoalRequest(goal.task, goal.max_duration_s, goal.new_episode)


def make_node() -> ChunkExecutorNode:
    return run_autostart(ChunkExecutorNode())


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(make_node, args, make_executor=lambda: MultiThreadedExecutor(num_threads=EXECUTOR_THREADS)))


if __name__ == "__main__":
    main()
