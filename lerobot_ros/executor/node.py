"""chunk_executor_node: the robot-side end of lerobot_ros (no torch, no LeRobot).

Turns action chunks from a policy_server_node into smooth, safe joint
commands at ``control_rate_hz`` (default ``fps``, the policy's rate). Start-up validates every parameter, then handshakes
(get_status + open_session); a refused or failed first handshake prints
``{"handshake": "refused", "reason": ...}`` on stdout and exits 1 before any
command is published. An accepted one prints ``{"handshake": "accepted",
...}`` and streams until SIGINT/SIGTERM, which closes the session.
``handshake_only:=true`` only checks the robot against the server and exits.

ROS entities (``~`` is the node's name, default chunk_executor):
  <state_topic>                          sensor_msgs/JointState (sub; mapped by joint name)
  <camera_topics[i]>                     sensor_msgs/Image or CompressedImage (raw sub: kept serialized)
  <output_topic>                         Float64MultiArray | JointTrajectory | JointState (pub, at control_rate_hz)
  ~/status                               lerobot_ros/ExecutorStatus (pub, every status_period_s)
  /diagnostics                           diagnostic_msgs/DiagnosticArray (pub)
  ~/pause, ~/resume, ~/reset_episode     std_srvs/Trigger (services)
  <replica>/status                       lerobot_ros/ServerStatus (sub, per replica; heartbeat watchdog, drains)
  <replica>/get_status, open_session, close_session, reset_episode   (service clients, per replica)
  <server>/clients/<client_id>/observation, action_chunk   (pub/sub, the session's data plane)

Threads: the control loop (``control_loop.ControlLoop``, absolute deadlines)
ticks the core and publishes each command; one EventsExecutor spins
every callback above (sensors, chunks, heartbeat, services, status); the
network worker thread (``worker.NetworkWorker``) sends one observation at a
time and waits for its chunk. The control loop never waits on a callback,
never does network I/O and never blocks. Camera frames arrive serialized and
are deserialized only when a request is built (``serialized.py``).

joint_trajectory mode publishes one single-point trajectory per control tick
(``time_from_start`` = one control period), not the queued chunk as one timed trajectory:
every point passes the same fail-safe tick and safety envelope as the other
modes, so a controller never keeps playing actions that went stale, or that
the operator paused, after the executor decided so (see output_modes.py).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from functools import partial

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.serialization import deserialize_message
from sensor_msgs.msg import CompressedImage, Image, JointState
from std_srvs.srv import Trigger

from lerobot_ros import names, wire
from lerobot_ros.executor.control_loop import ControlLoop
from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.handshake import HandshakeResult, RobotDeclaration, evaluate, handshake
from lerobot_ros.executor.server_link import RosServerLink
from lerobot_ros.executor.serialized import SerializedMessage
from lerobot_ros.executor.settings import ExecutorSettings, timing_warnings
from lerobot_ros.executor.state_machine import ExecutorState
from lerobot_ros.executor.worker import NetworkWorker
from lerobot_ros.msg import ExecutorStatus, ServerStatus
from lerobot_ros.node_support import NodeDone, NodeStartupError, declare_settings, events_executor, run_node
from lerobot_ros.output_modes import OUTPUT_MODES
from lerobot_ros.qos import COMMAND_QOS, SENSOR_QOS, STATUS_QOS
from lerobot_ros.executor.session_client import SessionClient

NODE_NAME = "chunk_executor"

CLOSE_TIMEOUT_S = 2.0
RESET_TIMEOUT_S = 2.0
WORKER_JOIN_TIMEOUT_S = 3.0
CONTROL_JOIN_TIMEOUT_S = 1.0


def report(result: dict) -> None:
    """The start-up outcome as one JSON line on stdout (read by tests and the demo)."""
    print(json.dumps(result), flush=True)


class ChunkExecutorNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        try:
            self.settings = settings = declare_settings(
                self, ExecutorSettings, node_namespace=self.get_namespace(), hostname=socket.gethostname()
            )
        except NodeStartupError as error:
            self._refuse(str(error))
        self.robot = RobotDeclaration(settings.joint_names, settings.camera_names, settings.state_dim)
        if settings.handshake_only:
            self._check_only()

        self.core = ExecutorCore(settings, time.monotonic())
        self.link = RosServerLink(self, settings, self.core)
        result = handshake(self.core, self.link, self.robot, time.monotonic)  # before any command entity exists
        if not result.accepted:
            self._refuse(result.reason, result)
        session = self.core.identity
        report(result.as_dict() | {"session_id": session.session_id, "client_id": settings.client_id,
                                   "rtc_enabled": session.rtc_active})
        for warning in timing_warnings(settings, session.chunk_size, replace_mode=session.rtc_active,
                                       threshold_s=self.core.request_threshold_s):
            self.get_logger().warning(warning)

        # Robot side: sensors in, commands out.
        core = self.core
        self.create_subscription(JointState, settings.state_topic, self.on_joint_state, SENSOR_QOS)
        for name, topic, transport in zip(settings.camera_names, settings.camera_topics, settings.camera_transports):
            message_type = CompressedImage if transport == "compressed" else Image
            decode = partial(deserialize_message, message_type=message_type)
            # raw: the callback keeps the bytes; a frame is deserialized only if a request uses it.
            self.create_subscription(
                message_type, topic,
                lambda data, name=name, decode=decode: core.on_camera(name, SerializedMessage(data, decode),
                                                                      time.monotonic()),
                SENSOR_QOS, raw=True,
            )
        self.output = OUTPUT_MODES[settings.output_mode]
        self.command_pub = self.create_publisher(self.output.message_type, settings.output_topic, COMMAND_QOS)
        self.control_period_s = 1.0 / settings.command_rate_hz

        # Server side: heartbeat watchdog of every replica (the data plane was created by the handshake).
        for namespace in settings.replicas:
            self.create_subscription(ServerStatus, names.in_namespace(namespace, names.STATUS),
                                     lambda msg, namespace=namespace: self.on_heartbeat(namespace, msg), STATUS_QOS)

        # Operator and telemetry.
        self.create_service(Trigger, "~/pause", self.on_pause)
        self.create_service(Trigger, "~/resume", self.on_resume)
        # Its own group: it awaits the server's answer, and must not hold up the timers meanwhile.
        self.create_service(Trigger, "~/reset_episode", self.on_reset_episode,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.status_pub = self.create_publisher(ExecutorStatus, "~/status", STATUS_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(settings.status_period_s, self.on_status)
        self._transitions_logged = 0
        self._rejections_logged = 0

        self.link.mark_spinning()
        self.worker = NetworkWorker(self.core, self.link, self.robot, log=self.get_logger().info)
        self.worker.start()
        # A thread waiting for the GIL gets it only after the switch interval (5 ms by
        # default, longer than a 250 Hz period): hand it over within a tenth of a period.
        sys.setswitchinterval(min(sys.getswitchinterval(), self.control_period_s / 10))
        self.control_loop = ControlLoop(settings.command_rate_hz, self.on_control_tick, self.on_control_error)
        self.control_loop.start()
        self.get_logger().info(
            f"streaming {settings.output_mode} on {self.command_pub.topic_name} at {settings.command_rate_hz:g} Hz "
            f"(policy {settings.fps:g} Hz) "
            f"as client {settings.client_id} (session {session.session_id}, rtc {session.rtc_active})"
        )

    # ---- start-up -------------------------------------------------------

    def _refuse(self, reason: str, result: HandshakeResult | None = None) -> None:
        report((result or HandshakeResult(False, reason)).as_dict())
        raise NodeStartupError(f"handshake refused: {reason}")

    def _check_only(self) -> None:
        """handshake_only: get_status and the contract check, then exit (0 accepted, 1 refused)."""
        session = SessionClient(self, self.settings.replicas[0], self.settings.client_id)
        view = session.get_status(self.settings.handshake_timeout_s)
        if isinstance(view, str):
            self._refuse(view)
        result = evaluate(self.robot, view.capabilities, view.ready, view.instance_id)
        if not result.accepted:
            self._refuse(result.reason, result)
        report(result.as_dict())
        raise NodeDone

    # ---- callbacks ------------------------------------------------------

    def on_joint_state(self, msg: JointState) -> None:
        self.core.on_joint_state(msg.name, msg.position, msg.velocity, time.monotonic())

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
        answer = await self.link.session.reset_episode_async(session_id, episode, RESET_TIMEOUT_S)
        if answer is None:
            response.success = False
            response.message = f"episode {episode} started locally; the server did not answer within {RESET_TIMEOUT_S:g} s"
        else:
            response.success = answer.success
            response.message = f"episode {episode}: server says " + (answer.message or "ok")
        return response

    def on_status(self) -> None:
        telemetry = self.core.snapshot(time.monotonic()).telemetry
        stamp = self.get_clock().now().to_msg()
        self.status_pub.publish(wire.executor_status_to_msg(telemetry, stamp))
        diagnostics = DiagnosticArray(status=[wire.executor_diagnostic(f"{self.get_name()}: chunk executor", telemetry)])
        diagnostics.header.stamp = stamp
        self.diagnostics_pub.publish(diagnostics)
        self._log_transitions()
        if telemetry.request_rejections > self._rejections_logged:
            self._rejections_logged = telemetry.request_rejections
            self.get_logger().warning(
                f"the server refused a request ({telemetry.request_rejections} so far): "
                f"{telemetry.last_rejection_reason}", throttle_duration_sec=5.0)

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
        control_loop = getattr(self, "control_loop", None)
        if control_loop is not None:
            control_loop.stop()
            control_loop.join(timeout=CONTROL_JOIN_TIMEOUT_S)
        worker = getattr(self, "worker", None)
        if worker is not None:
            worker.stop()
            worker.join(timeout=WORKER_JOIN_TIMEOUT_S)
        super().destroy_node()

    def drain(self, spin_once) -> None:
        """Stop the network worker, then close the session (bounded)."""
        self.worker.stop()
        deadline = time.monotonic() + WORKER_JOIN_TIMEOUT_S
        while self.worker.is_alive() and time.monotonic() < deadline:
            spin_once()  # a re-handshake in progress waits on futures the executor completes
        session_id = self.core.identity.session_id
        if not session_id:
            return
        answer = self.link.session.close_session(session_id, CLOSE_TIMEOUT_S, spin_once=spin_once)
        outcome = answer if isinstance(answer, str) else answer.message
        self.get_logger().info(f"session {session_id} closed ({outcome or 'ok'})")


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(ChunkExecutorNode, args, make_executor=events_executor))


if __name__ == "__main__":
    main()
