"""policy_server_node: serve one pre-warmed LeRobot policy to many robots over ROS 2.

ROS entities (under the node's name, default /lerobot, plus the optional ``service_name`` segment):
  ~/get_status      lerobot_ros/srv/GetStatus      what is served, and the load
  ~/open_session    lerobot_ros/srv/OpenSession    validate a robot, create its data plane
  ~/close_session   lerobot_ros/srv/CloseSession   destroy a session and its topics
  ~/reset_episode   lerobot_ros/srv/ResetEpisode   episode boundary for one session
  ~/status          lerobot_ros/msg/ServerStatus   heartbeat every heartbeat_period_s
  ~/clients/<client_id>/observation   lerobot_ros/msg/Observation  (sub, per session)
  ~/clients/<client_id>/action_chunk  lerobot_ros/msg/ActionChunk  (pub, per session)
  /diagnostics      diagnostic_msgs/DiagnosticArray  for rqt_robot_monitor

A managed (lifecycle) node: what each transition does, and in which order,
is lifecycle.py's (configure = validate, load, warm up, open; activate =
serve and advertise; deactivate = refuse new sessions and drain; cleanup =
release); this class supplies the steps. With ``autostart`` (default true)
it configures and activates itself at start-up (node_support.run_autostart).
Runtime parameters are applied by ``_apply_settings`` (node_support).
Callbacks only validate and deposit; the worker (pipeline.py: admission,
forward and finish threads; worker.py with ``pipeline: false``) runs the
request path (request_path.py), and only its forward thread runs the model.
The rules live in plain modules this node forwards to: sessions.py, client_topics.py,
session_opening.py (admission.py, capacity_gate.py), health.py and observability.py.
SIGTERM/SIGINT: the shutdown transition's work (heartbeat stops first, new
sessions are refused, the in-flight request is finished and published),
then the node exits.
"""

from __future__ import annotations

import sys
import time
import uuid

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.experimental import EventsExecutor
from rclpy.lifecycle import LifecycleNode, TransitionCallbackReturn

from lerobot_ros.msg import ActionChunk, Observation, ServerStatus
from lerobot_ros.node_shell.node_support import (
    DeclaredParameters,
    NodeStartupError,
    run_autostart,
    run_node,
)
from lerobot_ros.protocol import names
from lerobot_ros.protocol.contract import ServerCapabilities, shown
from lerobot_ros.protocol.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS, STATUS_QOS
from lerobot_ros.protocol.telemetry import DIAGNOSTICS_PERIOD_S, ServerHealth, ServerStats
from lerobot_ros.protocol.wire import control_plane
from lerobot_ros.protocol.wire.data_plane import RequestLimits, integrity
from lerobot_ros.server.duplicate_check import live_server_heard
from lerobot_ros.server.lifecycle import (
    ServerLifecycle,
    Stage,
    TransitionFailed,
    not_serving_reason,
)
from lerobot_ros.server.observability.health import (
    diagnostic_summary,
    health_snapshot,
    server_health,
)
from lerobot_ros.server.observability.http_endpoint import HealthSnapshot
from lerobot_ros.server.observability.outputs import Observability
from lerobot_ros.server.policy.policy_families import EXCLUSIVE
from lerobot_ros.server.policy.startup import StartupFailed, ready_runner
from lerobot_ros.server.requests.pipeline import admission_workers, build_worker
from lerobot_ros.server.requests.request_path import RequestHandler
from lerobot_ros.server.requests.scheduler import RoundRobinScheduler
from lerobot_ros.server.sessions.arrivals import ArrivalDesk, flood_policy
from lerobot_ros.server.sessions.capacity_gate import CapacityGate
from lerobot_ros.server.sessions.capacity_model import ServiceCurve
from lerobot_ros.server.sessions.client_topics import ClientTopics, ClientTopicTable
from lerobot_ros.server.sessions.flood_guard import ArrivalGuard, FloodPolicy
from lerobot_ros.server.sessions.open_checks import Refusal, ServerLoad
from lerobot_ros.server.sessions.registry import Session, SessionRegistry
from lerobot_ros.server.sessions.session_opening import OpenDecision, decide_open
from lerobot_ros.server.settings import ServerSettings
from lerobot_ros.srv import CloseSession, GetStatus, OpenSession, ResetEpisode

NODE_NAME = "lerobot"

GC_PERIOD_S = 1.0
DRAIN_TIMEOUT_S = 30.0


class PolicyServerNode(LifecycleNode):
    """The ROS adapter of ``lifecycle.ServerLifecycle``: its steps, services and callbacks."""

    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self._joined_graph_at = time.monotonic()  # discovery runs while the policy loads
        # first: destroy_node needs it, whatever fails below
        self.lifecycle = ServerLifecycle(self)
        self.parameters = DeclaredParameters(self, ServerSettings)
        # Start-up-only parameters may change while unconfigured: the next configure reads them.
        self.parameters.on_change(
            self._apply_settings, configuring=lambda: self.lifecycle.stage is Stage.UNCONFIGURED
        )
        self.instance_id = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self.heartbeat_seq = 0
        self.draining = False
        # the last failed transition's reason (run_autostart reports it)
        self.transition_failure = ""
        self.sessions = SessionRegistry()
        self.stats = ServerStats()
        self.client_topics = ClientTopicTable(
            self._create_client_topics, self._destroy_client_topics
        )
        self.guard = ArrivalGuard(
            FloodPolicy(), lambda record: self.observability.audit.write(record)
        )
        self.worker = None  # InferenceWorker or PipelinedWorker while serving
        # while a signal's drain runs: spins the executor, so requests are refused meanwhile
        self._drain_spin = None
        # Made by the configure transition (read_settings, load_policy, _apply_settings,
        # open_observability, create_entities) and activate (start_serving); None until then.
        self.settings: ServerSettings | None = None
        self.prefix = ""  # "~/", or "~/<service_name>/": where the services and topics are
        self.limits: RequestLimits | None = None
        self.runner = None  # the served policy (policy_seam.ServedPolicy)
        self.capabilities: ServerCapabilities | None = None
        self.capabilities_msg = None  # the same, as the wire's Capabilities message
        self.capacity: CapacityGate | None = None
        self.scheduler: RoundRobinScheduler | None = None
        self.max_sessions = 0
        self.max_batch_size = 1
        self.arrivals: ArrivalDesk | None = None
        self.observability: Observability | None = None
        self.status_pub = None
        self.diagnostics_pub = None
        self.heartbeat_timer = None

    @property
    def ready(self) -> bool:
        return self.lifecycle.serving and not self.draining

    # ---- lifecycle transitions (rclpy callbacks) -------------------------

    def on_configure(self, state) -> TransitionCallbackReturn:
        return self._transition("configure", self.lifecycle.configure)

    def on_activate(self, state) -> TransitionCallbackReturn:
        return self._transition("activate", self.lifecycle.activate)

    def on_deactivate(self, state) -> TransitionCallbackReturn:
        return self._transition("deactivate", self.lifecycle.deactivate)

    def on_cleanup(self, state) -> TransitionCallbackReturn:
        return self._transition("cleanup", self.lifecycle.cleanup)

    def on_shutdown(self, state) -> TransitionCallbackReturn:
        return self._transition("shutdown", self.lifecycle.shutdown)

    def on_error(self, state) -> TransitionCallbackReturn:
        self.lifecycle.recover()  # rclpy goes back to unconfigured: hold nothing there
        return TransitionCallbackReturn.SUCCESS

    def _transition(self, name: str, run) -> TransitionCallbackReturn:
        try:
            reason = run()
        except Exception as error:  # noqa: BLE001 - rclpy would swallow it without a word
            self.transition_failure = f"{type(error).__name__}: {error}"
            self.get_logger().error(f"{name} raised {self.transition_failure}")
            return TransitionCallbackReturn.ERROR
        if reason is None:
            self.transition_failure = ""
            return TransitionCallbackReturn.SUCCESS
        self.transition_failure = reason
        self.get_logger().error(f"{name} failed: {reason}")
        return TransitionCallbackReturn.FAILURE

    # ---- configure steps (lifecycle.ServerParts) -------------------------

    def read_settings(self) -> None:
        try:
            self.settings = self.parameters.settings()
        except NodeStartupError as error:
            raise TransitionFailed(str(error)) from error
        self.prefix = "~/" + (
            self.settings.service_name + "/" if self.settings.service_name else ""
        )
        self.limits = RequestLimits(max_image_bytes=self.settings.max_image_bytes)

    def load_policy(self):
        try:
            curve = ServiceCurve()
            self.runner = ready_runner(
                self.settings, self.get_logger(), on_forward=curve.record_forward
            )
        except StartupFailed as error:
            raise TransitionFailed(str(error)) from error
        self.capabilities = self.runner.capabilities
        self.capabilities_msg = control_plane.capabilities_to_msg(self.capabilities)
        self.capacity = CapacityGate(self.capabilities, curve)
        self.scheduler = RoundRobinScheduler()
        self._apply_settings(self.settings)

        def release() -> None:
            # the model, its processors and their memory go with the last reference
            self.runner = None

        return release

    def _apply_settings(self, settings: ServerSettings) -> None:
        """Settings in force: at configure, and for a runtime parameter change (lifecycle.py)."""
        self.settings = settings
        self.max_sessions = (
            1 if self.capabilities.serving_mode == EXCLUSIVE else settings.max_sessions
        )
        # Exclusive mode has one session; a family whose chunks would depend on batch partners runs
        # alone.
        self.max_batch_size = settings.max_batch_size if self.runner.batchable else 1
        self.scheduler.set_batching(self.max_batch_size, settings.batch_window_ms / 1000.0)
        self.capacity.configure(
            settings.latency_budget_ms if settings.pipeline else 0.0,
            self.max_batch_size,
            admission_workers(settings.admission_workers),
        )
        self.guard.policy = flood_policy(settings)
        self.arrivals = ArrivalDesk(
            self.sessions,
            self.guard,
            lambda client_id, msg: self.scheduler.deposit(client_id, msg),
            lambda: self.stats.record("rejected", 0.0, 0),
            lambda text: self.get_logger().warning(text, throttle_duration_sec=1.0),
            self.limits.max_id_chars,
            promoted=lambda s: self.observability.standby_promoted(
                s, time.monotonic(), self.get_logger()
            ),
        )

    def open_observability(self):
        self.observability = Observability.open(
            audit_log=self.settings.audit_log,
            instance_id=self.instance_id,
            capture_dir=self.settings.capture_dir,
            capture_max_mb=self.settings.capture_max_mb,
            http_host=self.settings.http_host,
            http_port=self.settings.http_port,
            snapshot=self.health_snapshot,
            log=self.get_logger(),
        )
        return self.observability.close

    def create_entities(self):
        entities = [
            (
                self.destroy_publisher,
                self.create_publisher(ServerStatus, self.prefix + names.STATUS, STATUS_QOS),
            ),
            (self.destroy_publisher, self.create_publisher(DiagnosticArray, "/diagnostics", 10)),
            (
                self.destroy_service,
                self.create_service(GetStatus, self.prefix + names.GET_STATUS, self.on_get_status),
            ),
            (
                self.destroy_service,
                self.create_service(
                    OpenSession, self.prefix + names.OPEN_SESSION, self.on_open_session
                ),
            ),
            (
                self.destroy_service,
                self.create_service(
                    CloseSession, self.prefix + names.CLOSE_SESSION, self.on_close_session
                ),
            ),
            (
                self.destroy_service,
                self.create_service(
                    ResetEpisode, self.prefix + names.RESET_EPISODE, self.on_reset_episode
                ),
            ),
            (self.destroy_timer, self.create_timer(DIAGNOSTICS_PERIOD_S, self.on_diagnostics)),
            (self.destroy_timer, self.create_timer(GC_PERIOD_S, self.collect_garbage)),
        ]
        self.status_pub, self.diagnostics_pub = entities[0][1], entities[1][1]

        def release() -> None:
            for destroy, entity in reversed(entities):
                destroy(entity)

        return release

    # ---- serving (activate, deactivate) ---------------------------------

    def start_serving(self) -> None:
        self.draining = False
        self.worker = self._start_worker()
        self.heartbeat_timer = self.create_timer(
            self.settings.heartbeat_period_s, self.on_heartbeat
        )
        self.get_logger().info(
            f"ready: serving {self.capabilities.policy_type} as {self.capabilities.serving_mode} "
            "(fingerprint "
            f"{self.capabilities.model_fingerprint}, up to {self.max_sessions} sessions, up to "
            f"{self.max_batch_size} "
            f"per forward pass, {self.worker.shape}) at {self.namespace_name()}"
        )

    def refuse_new_sessions(self) -> None:
        self.draining = True

    def drain_serving(self) -> None:
        """Stop the heartbeat, finish the in-flight request, refuse the waiting ones, close the
        sessions."""
        self.get_logger().info(
            "draining: heartbeat stopped, new sessions refused, finishing the in-flight request"
        )
        self.destroy_timer(self.heartbeat_timer)
        # The last heartbeat announces the drain: robots move to another replica now, not at the
        # heartbeat timeout.
        self.on_heartbeat()
        self.worker.stop()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self.worker.is_alive() and time.monotonic() < deadline:
            if self._drain_spin is not None:
                self._drain_spin()
            else:  # inside a transition callback: the executor is busy with it
                self.worker.join(timeout=0.05)
        if self.worker.is_alive():
            self.get_logger().error(
                f"the in-flight request did not finish within {DRAIN_TIMEOUT_S:.0f} s"
            )
        for session in self.sessions.sessions():
            self._end_session(session, "the server stopped serving")
        self.scheduler = RoundRobinScheduler(
            max_batch_size=self.max_batch_size,
            batch_window_s=self.settings.batch_window_ms / 1000.0,
        )
        self.get_logger().info(f"drained after {self.stats.requests_served} requests served")

    # ---- start-up checks -------------------------------------------------

    def namespace_name(self) -> str:
        name = self.get_fully_qualified_name()
        return name + ("/" + self.settings.service_name if self.settings.service_name else "")

    def refuse_a_second_instance(self) -> None:
        """Stop before advertising if a live server already serves this namespace
        (duplicate_check.py)."""
        topic = self.resolve_topic_name(self.prefix + names.STATUS)
        heard = live_server_heard(
            self, topic, self._joined_graph_at, self.settings.heartbeat_period_s
        )
        if heard is not None:
            raise TransitionFailed(
                f"another policy_server_node (instance {heard.instance_id}) already serves "
                f"{heard.server_namespace}: refusing to start a second one there; give this one "
                "another "
                "node name or service_name"
            )

    def _start_worker(self):
        handler = RequestHandler(
            self.runner,
            self.sessions,
            publish=self._publish_chunk,
            audit=self.observability.audit.write,
            load=lambda: (self.sessions.count(), self.max_sessions, self.scheduler.pending()),
            capture=self.observability.capture_write,
            limits=self.limits,
        )
        worker = build_worker(
            self.settings.pipeline,
            self.settings.admission_workers,
            self.scheduler,
            handler,
            self.stats,
            self.get_logger(),
            self.capacity.curve,
        )
        worker.start()
        return worker

    # ---- data plane -----------------------------------------------------

    def _create_client_topics(self, client_id: str) -> tuple:
        subscription = self.create_subscription(
            Observation,
            self.prefix + names.observation_topic(client_id),
            lambda msg: self._on_observation(client_id, msg),
            OBSERVATION_QOS,
        )
        publisher = self.create_publisher(
            ActionChunk, self.prefix + names.action_chunk_topic(client_id), ACTION_CHUNK_QOS
        )
        return subscription, publisher

    def _destroy_client_topics(self, topics: ClientTopics) -> None:
        self.destroy_subscription(topics.subscription)
        self.destroy_publisher(topics.publisher)

    def _on_observation(self, client_id: str, msg: Observation) -> None:
        self.arrivals.on_observation(client_id, msg, time.monotonic())

    def _publish_chunk(self, client_id: str, msg: ActionChunk) -> None:
        """Sign the chunk with the client's open session's secret, then publish it on its topic."""
        session = self.sessions.get(client_id)
        if session is not None:
            integrity.sign(msg, session.key)
        self.client_topics.publish(client_id, msg)

    def _end_session(self, session: Session, why: str) -> bool:
        if self.sessions.remove(session.client_id, session.session_id) is None:
            return False
        if self.client_topics.close(session.client_id, session.session_id):
            self.scheduler.remove(session.client_id)
        self.get_logger().info(
            f"session {session.session_id} of {session.client_id} closed: {why}"
        )
        return True

    def collect_garbage(self) -> None:
        """Close sessions whose client went silent or whose publisher left the graph."""
        timeout_s = self.settings.session_idle_timeout_s
        expired = self.sessions.expired(
            time.monotonic(),
            timeout_s,
            self.client_topics.publisher_count,
            self.settings.session_first_observation_timeout_s,
        )
        for session, why in expired:
            self._end_session(session, why)
        for client_id, why, backoff_s in self.arrivals.close_floods(
            self._end_session, self.observability.audit.write, time.monotonic()
        ):
            self.get_logger().warning(
                f"{client_id}: {why}; its OpenSession is refused for {backoff_s:g} s"
            )

    # ---- services -------------------------------------------------------

    def on_open_session(
        self, request: OpenSession.Request, response: OpenSession.Response
    ) -> OpenSession.Response:
        response.capabilities, response.max_sessions = self.capabilities_msg, self.max_sessions
        refusal = self._refusal_before_matching(request.client_id)
        if refusal is not None:
            return self._refuse_open(request.client_id, response, *refusal, self.sessions.count())
        load = ServerLoad(
            ready=self.ready,
            draining=self.draining,
            max_sessions=self.max_sessions,
            active_sessions=self.sessions.count(excluding_client=request.client_id),
        )
        decision = decide_open(
            control_plane.open_request_from_msg(request),
            request.owner_secret,
            self.capabilities,
            load,
            self.sessions,
            self.settings,
            latency_refusal=lambda open_request, rtc: self.capacity.refusal(
                open_request.fps, rtc, self.sessions.sessions(), open_request.client_id
            ),
        )
        if decision.session is None:
            return self._refuse_open(
                request.client_id,
                response,
                decision.refusal,
                decision.message,
                decision.active_sessions,
            )
        return self._accept_open(request, response, decision)

    def _refusal_before_matching(self, client_id: str) -> tuple[Refusal, str] | None:
        """Why no request of this client is matched now: not serving, or its flood backoff runs."""
        if not self.lifecycle.serving:
            return Refusal.DRAINING, not_serving_reason(self.lifecycle.stage)
        backoff = self.guard.reopen_refusal(client_id, time.monotonic())
        if backoff is not None:
            return Refusal.BACKOFF, backoff
        return None

    def _accept_open(
        self, request: OpenSession.Request, response: OpenSession.Response, decision: OpenDecision
    ) -> OpenSession.Response:
        """The claimed session made servable: its processors, its topics, the answer."""
        session = decision.session
        # Built after the claim: the service thread is the only one opening sessions,
        # and the worker reads the processors only after the first observation.
        session.processors = self.runner.new_session_processors()
        self.guard.session_opened(session.client_id)
        topics = self.client_topics.open(session.client_id, session.session_id)
        if decision.replaced:
            # its waiting observation belongs to the old session
            self.scheduler.remove(session.client_id)
        response.accepted, response.refusal = True, int(Refusal.NONE)
        response.warnings = list(decision.warnings)
        response.session_id, response.session_secret = session.session_id, session.secret
        response.rtc_enabled = session.rtc_enabled
        response.observation_topic = topics.subscription.topic_name
        response.action_chunk_topic = topics.publisher.topic_name
        response.session_idle_timeout_s = self.settings.session_idle_timeout_s
        response.active_sessions = self.sessions.count()
        self.get_logger().info(
            f"{'standby ' if session.standby else ''}session {session.session_id} opened for "
            f"{request.client_id}"
            + (" (replacing its previous session)" if decision.replaced else "")
            + (f"; warnings: {'; '.join(decision.warnings)}" if decision.warnings else "")
        )
        return response

    def _refuse_open(
        self,
        client_id: str,
        response: OpenSession.Response,
        refusal: Refusal,
        message: str,
        active_sessions: int,
    ) -> OpenSession.Response:
        response.accepted, response.refusal, response.message = False, int(refusal), message
        response.active_sessions = active_sessions
        self.get_logger().warning(f"refused session for {shown(client_id)}: {message}")
        return response

    def on_close_session(
        self, request: CloseSession.Request, response: CloseSession.Response
    ) -> CloseSession.Response:
        session, response.message = self.sessions.owned(
            request.client_id, request.session_id, request.session_secret
        )
        response.success = session is not None and self._end_session(
            session, "closed by the client"
        )
        return response

    def on_reset_episode(
        self, request: ResetEpisode.Request, response: ResetEpisode.Response
    ) -> ResetEpisode.Response:
        reset = self.sessions.reset_episode(
            request.client_id, request.session_id, request.session_secret, request.episode
        )
        response.success, response.episode, response.message = (
            reset.success,
            reset.episode,
            reset.message,
        )
        return response

    # ---- observability --------------------------------------------------

    def health(self) -> ServerHealth:
        return server_health(
            instance_id=self.instance_id,
            server_namespace=self.namespace_name(),
            heartbeat_seq=self.heartbeat_seq,
            ready=self.ready,
            draining=self.draining,
            uptime_s=time.monotonic() - self.started,
            active_sessions=self.sessions.count(),
            max_sessions=self.max_sessions,
            standby_sessions=self.sessions.standby_count(),
            pending_requests=self.scheduler.pending(),
            stats=self.stats,
            max_batch_size=self.max_batch_size,
            refusals=self.guard.report(time.monotonic()),
            capacity=self.capacity.report(self.sessions.sessions()),
        )

    def status_msg(self) -> ServerStatus:
        return control_plane.server_status_to_msg(
            self.health(), self.capabilities_msg, self.get_clock().now().to_msg()
        )

    def on_heartbeat(self) -> None:
        self.heartbeat_seq += 1
        self.status_pub.publish(self.status_msg())

    def on_get_status(
        self, request: GetStatus.Request, response: GetStatus.Response
    ) -> GetStatus.Response:
        response.status = self.status_msg()
        return response

    def on_diagnostics(self) -> None:
        health = self.health()
        level, message = diagnostic_summary(health)
        self.diagnostics_pub.publish(
            control_plane.server_diagnostics(
                health,
                f"{self.get_name()}: policy server",
                self.capabilities.policy_type,
                self.capabilities.model_fingerprint,
                level.name,
                message,
                self.get_clock().now().to_msg(),
            )
        )

    def health_snapshot(self) -> HealthSnapshot:
        return health_snapshot(
            self.health(), self.capabilities.policy_type, self.capabilities.model_fingerprint
        )

    # ---- shutdown -------------------------------------------------------

    def destroy_node(self) -> None:
        # Also reached without a drain (context shut down from outside): shutdown runs once.
        self.lifecycle.shutdown()
        super().destroy_node()

    def on_stop_requested(self) -> None:
        """From the signal handler: refuse new sessions from this moment on."""
        self.draining = True

    def drain(self, spin_once) -> None:
        """After a signal (``run_node``): the shutdown transition's work, the executor spun while
        draining."""
        self._drain_spin = spin_once
        self.lifecycle.shutdown()


def main(args: list[str] | None = None) -> None:
    # rclpy's events executor dispatches from C++ and lets go of the GIL as soon as a callback
    # returns, so the inference worker takes a deposited observation at once, where the Python
    # executor first walks back to its wait set (the queue wait of both:
    # docs/reference/benchmarks.md). It runs on the main thread here, where it delivered every
    # message (off the main thread, rclpy 9.1.2's dropped some).
    sys.exit(
        run_node(lambda: run_autostart(PolicyServerNode()), args, make_executor=EventsExecutor)
    )


if __name__ == "__main__":
    main()
