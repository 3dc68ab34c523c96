"""policy_server_node: serve one pre-warmed LeRobot policy to many robots over ROS 2.

ROS entities (under the node's name, default /lerobot, plus the optional
``service_name`` segment):
  ~/get_status      lerobot_ros/srv/GetStatus      what is served, and the load
  ~/open_session    lerobot_ros/srv/OpenSession    validate a robot, create its data plane
  ~/close_session   lerobot_ros/srv/CloseSession   destroy a session and its topics
  ~/reset_episode   lerobot_ros/srv/ResetEpisode   episode boundary for one session
  ~/status          lerobot_ros/msg/ServerStatus   heartbeat every heartbeat_period_s
  ~/clients/<client_id>/observation   lerobot_ros/msg/Observation  (sub, per session)
  ~/clients/<client_id>/action_chunk  lerobot_ros/msg/ActionChunk  (pub, per session)
  /diagnostics      diagnostic_msgs/DiagnosticArray  for rqt_robot_monitor

Start-up order is load -> warm up -> advertise. Callbacks only validate and
deposit; one inference worker thread owns the model. SIGTERM/SIGINT drain:
heartbeat stops first, new sessions are refused, the in-flight request is
finished and published, then the node exits.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import uuid
from pathlib import Path

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus
from rclpy.node import Node

from lerobot_ros import names, wire
from lerobot_ros.contract import shown
from lerobot_ros.msg import ActionChunk, Observation, ServerStatus
from lerobot_ros.node_support import NodeStartupError, ParameterSpec, declare_validated, declared_strings, run_node
from lerobot_ros.qos import ACTION_CHUNK_QOS, OBSERVATION_QOS, STATUS_QOS
from lerobot_ros.server.admission import Refusal, ServerLoad, admit
from lerobot_ros.server.audit import AuditLog
from lerobot_ros.server.capture import CaptureWriter
from lerobot_ros.server.http_endpoint import HealthEndpoint, HealthSnapshot, Metric
from lerobot_ros.server.policy_families import DTYPES, EXCLUSIVE, SHARED, UnsupportedPolicyError
from lerobot_ros.server.request_path import RequestHandler, RequestLimits
from lerobot_ros.server.scheduler import RoundRobinScheduler
from lerobot_ros.server.sessions import Session, SessionRegistry
from lerobot_ros.server.warmup import warm_up
from lerobot_ros.server.worker import InferenceWorker
from lerobot_ros.srv import CloseSession, GetStatus, OpenSession, ResetEpisode
from lerobot_ros.telemetry import SERVER_METRICS, ServerHealth, ServerStats

NODE_NAME = "lerobot"

PARAMETERS = (
    ParameterSpec("checkpoint", "", "LeRobot checkpoint: a local directory or a Hugging Face Hub id (required)"),
    ParameterSpec("revision", "", "Hub revision (branch, tag or commit) of the checkpoint; empty for the default"),
    ParameterSpec("device", "auto", "Torch device: auto (cuda when available, else cpu), cpu, cuda, cuda:N"),
    ParameterSpec("dtype", "float32", "Model dtype: float32, float16 or bfloat16"),
    ParameterSpec(
        "action_names",
        [""],
        "Ordered action names the policy outputs; empty to read them from the checkpoint's lerobot_ros.json",
    ),
    ParameterSpec("trained_fps", 0.0, "Control rate the policy was trained at (Hz); 0 to read it from lerobot_ros.json"),
    ParameterSpec("strict_fps", False, "Refuse robots whose fps differs from trained_fps (otherwise warn)"),
    ParameterSpec("service_name", "", "Extra namespace segment for every entity, e.g. act_so101 -> /lerobot/act_so101/..."),
    ParameterSpec("default_task", "", "Task used when a robot sends none"),
    ParameterSpec("pin_task", False, "Serve only default_task: refuse robots and observations asking for another"),
    ParameterSpec("serving_mode", "auto", "auto (from the policy family), shared, or exclusive (one session)"),
    ParameterSpec("max_sessions", 8, "Most sessions open at once (exclusive mode: always 1)"),
    ParameterSpec("warmup_inferences", 2, "Requests run through the full request path before the server advertises"),
    ParameterSpec("rtc_enabled", True, "Offer real-time chunking to robots that ask, when the policy supports it"),
    ParameterSpec("rtc_execution_horizon", 10, "RTC: steps of the previous chunk's prefix the policy conditions on"),
    ParameterSpec("heartbeat_period_s", 0.5, "Period of the ~/status heartbeat (seconds)"),
    ParameterSpec("session_idle_timeout_s", 10.0, "Close a session after this long without an observation (seconds)"),
    ParameterSpec("max_image_bytes", 8 << 20, "Largest accepted camera frame, compressed or raw (bytes)"),
    ParameterSpec("audit_log", "auto", "One JSON line per request: auto (ROS log dir), off, - (stdout), or a file path"),
    ParameterSpec("capture_dir", "", "Directory for a bounded msgpack capture of request/response pairs; empty: off"),
    ParameterSpec("capture_max_mb", 256, "Size bound of the capture directory (MiB); oldest segments are deleted"),
    ParameterSpec("http_port", 0, "Port of the HTTP /healthz and /metrics endpoint; 0: off"),
    ParameterSpec("http_host", "127.0.0.1", "Address the HTTP endpoint binds to"),
    ParameterSpec(
        "noise_seed",
        -1,
        "-1: fresh noise every request; >= 0: seed each request's noise from (seed, client, episode, seq), "
        "making flow-matching and diffusion chunks reproducible",
    ),
    ParameterSpec(
        "inject_delay_s",
        0.0,
        "Fault injection: extra seconds before each inference, to rehearse a slower model; keep 0 in production",
    ),
)

_DEVICE = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
_SERVING_MODES = ("auto", SHARED, EXCLUSIVE)

DIAGNOSTICS_PERIOD_S = 1.0
GC_PERIOD_S = 1.0
PUBLISHER_GONE_GRACE_S = 3.0
DRAIN_TIMEOUT_S = 30.0


def parameter_problems(params: dict) -> list[str]:
    """What is wrong with the parameters, checked before seconds of loading."""
    problems = []
    if not params["checkpoint"]:
        problems.append("'checkpoint' is empty: give a checkpoint directory or Hub id")
    if params["dtype"] not in DTYPES:
        problems.append(f"'dtype' is {params['dtype']!r}, expected one of {list(DTYPES)}")
    if not _DEVICE.match(params["device"]):
        problems.append(f"'device' is {params['device']!r}, expected auto, cpu, mps, cuda or cuda:N")
    if params["serving_mode"] not in _SERVING_MODES:
        problems.append(f"'serving_mode' is {params['serving_mode']!r}, expected one of {list(_SERVING_MODES)}")
    if params["service_name"] and not re.match(r"^[A-Za-z][A-Za-z0-9_]*$", params["service_name"]):
        problems.append(f"'service_name' is {params['service_name']!r}, expected one ROS name segment")
    if params["pin_task"] and not params["default_task"]:
        problems.append("'pin_task' is true but 'default_task' is empty: name the task to pin")
    for name in ("warmup_inferences", "capture_max_mb"):
        if params[name] < 0:
            problems.append(f"'{name}' is {params[name]}, expected 0 or more")
    for name in ("max_sessions", "rtc_execution_horizon", "max_image_bytes"):
        if params[name] < 1:
            problems.append(f"'{name}' is {params[name]}, expected 1 or more")
    if params["noise_seed"] < -1:
        problems.append(f"'noise_seed' is {params['noise_seed']}, expected -1 (off) or a seed >= 0")
    if params["inject_delay_s"] < 0:
        problems.append(f"'inject_delay_s' is {params['inject_delay_s']}, expected 0 or more")
    for name in ("heartbeat_period_s", "session_idle_timeout_s"):
        if params[name] <= 0:
            problems.append(f"'{name}' is {params[name]}, expected more than 0")
    if not 0 <= params["http_port"] <= 65535:
        problems.append(f"'http_port' is {params['http_port']}, expected 0 (off) or a port number")
    return problems


class PolicyServerNode(Node):
    def __init__(self) -> None:
        super().__init__(NODE_NAME)
        self.params = declare_validated(self, PARAMETERS, parameter_problems)
        self.instance_id = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self.heartbeat_seq = 0
        self.ready = self.draining = False
        self.prefix = "~/" + (self.params["service_name"] + "/" if self.params["service_name"] else "")

        self.runner = self._load()
        self.capabilities = self.runner.capabilities
        self.capabilities_msg = wire.capabilities_to_msg(self.capabilities)
        self.max_sessions = 1 if self.capabilities.serving_mode == EXCLUSIVE else self.params["max_sessions"]
        self._warm_up()

        self.sessions = SessionRegistry()
        self.scheduler = RoundRobinScheduler()
        self.stats = ServerStats()
        self._data_plane_lock = threading.Lock()
        self._data_plane: dict[str, tuple] = {}  # client_id -> (session_id, subscription, publisher)
        self._open_observability()
        self.worker = self._start_worker()

        self.status_pub = self.create_publisher(ServerStatus, self.prefix + names.STATUS, STATUS_QOS)
        self.diagnostics_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_service(GetStatus, self.prefix + names.GET_STATUS, self.on_get_status)
        self.create_service(OpenSession, self.prefix + names.OPEN_SESSION, self.on_open_session)
        self.create_service(CloseSession, self.prefix + names.CLOSE_SESSION, self.on_close_session)
        self.create_service(ResetEpisode, self.prefix + names.RESET_EPISODE, self.on_reset_episode)
        self.heartbeat_timer = self.create_timer(self.params["heartbeat_period_s"], self.on_heartbeat)
        self.create_timer(DIAGNOSTICS_PERIOD_S, self.on_diagnostics)
        self.create_timer(GC_PERIOD_S, self.collect_garbage)
        self.ready = True
        self.get_logger().info(
            f"ready: serving {self.capabilities.policy_type} as {self.capabilities.serving_mode} "
            f"(fingerprint {self.capabilities.model_fingerprint}, up to {self.max_sessions} sessions) "
            f"at {self.namespace_name()}"
        )

    # ---- start-up -------------------------------------------------------

    def namespace_name(self) -> str:
        name = self.get_fully_qualified_name()
        return name + ("/" + self.params["service_name"] if self.params["service_name"] else "")

    def _load(self):
        # torch and LeRobot take seconds to import: import them here, after
        # rclpy.init, so Ctrl-C during start-up ends the node cleanly.
        from lerobot_ros.server.checkpoint import CheckpointError, load_policy
        from lerobot_ros.server.inference import PolicyRunner

        checkpoint = self.params["checkpoint"]
        action_names = list(declared_strings(self.params["action_names"]))
        self.get_logger().info(f"loading {checkpoint} on {self.params['device']} as {self.params['dtype']}")
        started = time.monotonic()
        try:
            loaded = load_policy(
                checkpoint,
                revision=self.params["revision"],
                device=self.params["device"],
                dtype=self.params["dtype"],
                action_names=action_names or None,
                trained_fps=self.params["trained_fps"],
                serving_mode=self.params["serving_mode"],
                rtc_enabled=self.params["rtc_enabled"],
                rtc_execution_horizon=self.params["rtc_execution_horizon"],
                pinned_task=self.params["default_task"] if self.params["pin_task"] else "",
            )
        except (CheckpointError, UnsupportedPolicyError) as error:
            raise NodeStartupError(str(error)) from error
        self.get_logger().info(
            f"loaded {loaded.capabilities.policy_type} in {time.monotonic() - started:.1f} s; "
            f"serving mode {loaded.capabilities.serving_mode}: {loaded.serving_reason}"
        )
        if self.params["inject_delay_s"] > 0:
            self.get_logger().warning(f"fault injection: every inference is delayed by {self.params['inject_delay_s']} s")
        return PolicyRunner(
            loaded,
            self.params["rtc_enabled"],
            self.params["rtc_execution_horizon"],
            noise_seed=self.params["noise_seed"] if self.params["noise_seed"] >= 0 else None,
            inject_delay_s=self.params["inject_delay_s"],
        )

    def _warm_up(self) -> None:
        count = self.params["warmup_inferences"]
        self.get_logger().info(f"warming up ({count} requests through the full request path)")
        try:
            durations = warm_up(self.runner, count, self.params["default_task"])
        except RuntimeError as error:
            raise NodeStartupError(f"warm-up failed: {error}") from error
        if durations:
            self.get_logger().info("warm-up done: " + ", ".join(f"{seconds * 1000:.0f} ms" for seconds in durations))

    def _open_observability(self) -> None:
        self.audit = AuditLog.open(self.params["audit_log"], self.instance_id)
        if self.audit.path is not None:
            self.get_logger().info(f"audit log: {self.audit.path}")
        self.capture = None
        if self.params["capture_dir"]:
            self.capture = CaptureWriter(Path(self.params["capture_dir"]).expanduser(), self.params["capture_max_mb"] << 20)
            self.get_logger().info(f"capturing request/response pairs into {self.params['capture_dir']}")
        self.http = None
        if self.params["http_port"]:
            self.http = HealthEndpoint(self.params["http_host"], self.params["http_port"], self.health_snapshot)
            self.http.start()
            self.get_logger().info(f"health and metrics on http://{self.params['http_host']}:{self.http.port}/")

    def _start_worker(self):
        handler = RequestHandler(
            self.runner,
            self.sessions,
            publish=self.publish_chunk,
            audit=self.audit.write,
            load=lambda: (self.sessions.count(), self.max_sessions, self.scheduler.pending()),
            capture=self.capture.write if self.capture is not None else None,
            limits=RequestLimits(max_image_bytes=self.params["max_image_bytes"]),
        )
        worker = InferenceWorker(self.scheduler, handler, self.stats, self.get_logger())
        worker.start()
        return worker

    # ---- data plane -----------------------------------------------------

    def publish_chunk(self, client_id: str, chunk: ActionChunk) -> None:
        """Called from the worker thread; the lock keeps the publisher alive meanwhile."""
        with self._data_plane_lock:
            entry = self._data_plane.get(client_id)
            if entry is not None:
                entry[2].publish(chunk)

    def _on_observation(self, client_id: str, msg: Observation) -> None:
        session = self.sessions.get(client_id)
        if session is not None:
            session.last_seen = time.monotonic()
        self.scheduler.deposit(client_id, msg)

    def _create_data_plane(self, session: Session) -> tuple[str, str]:
        with self._data_plane_lock:
            old = self._data_plane.pop(session.client_id, None)
            if old is None:
                subscription = self.create_subscription(
                    Observation,
                    self.prefix + names.observation_topic(session.client_id),
                    lambda msg, client_id=session.client_id: self._on_observation(client_id, msg),
                    OBSERVATION_QOS,
                )
                publisher = self.create_publisher(
                    ActionChunk, self.prefix + names.action_chunk_topic(session.client_id), ACTION_CHUNK_QOS
                )
            else:
                # Same client re-opening: its topics stay, only the session changes.
                _, subscription, publisher = old
            self._data_plane[session.client_id] = (session.session_id, subscription, publisher)
        return subscription.topic_name, publisher.topic_name

    def _destroy_data_plane(self, session: Session) -> None:
        with self._data_plane_lock:
            entry = self._data_plane.get(session.client_id)
            if entry is None or entry[0] != session.session_id:
                return
            del self._data_plane[session.client_id]
            self.destroy_subscription(entry[1])
            self.destroy_publisher(entry[2])
        self.scheduler.remove(session.client_id)

    def _end_session(self, session: Session, why: str) -> bool:
        if self.sessions.remove(session.client_id, session.session_id) is None:
            return False
        self._destroy_data_plane(session)
        self.get_logger().info(f"session {session.session_id} of {session.client_id} closed: {why}")
        return True

    def collect_garbage(self) -> None:
        """Close sessions whose client went silent or whose publisher left the graph."""
        now = time.monotonic()
        for session in self.sessions.idle(now, self.params["session_idle_timeout_s"]):
            self._end_session(session, f"no observation for {self.params['session_idle_timeout_s']:g} s")
        for session in self.sessions.sessions():
            with self._data_plane_lock:
                entry = self._data_plane.get(session.client_id)
                publishers = entry[1].get_publisher_count() if entry is not None else 0
            if publishers:
                session.publisher_seen, session.publisher_missing_since = True, None
            elif session.publisher_seen:
                # A router restart or a blip drops graph information for a
                # moment (rmw_zenoh liveliness); only a lasting absence counts.
                session.publisher_missing_since = session.publisher_missing_since or now
                if now - session.publisher_missing_since >= PUBLISHER_GONE_GRACE_S:
                    self._end_session(session, f"its observation publisher left the ROS graph {PUBLISHER_GONE_GRACE_S:g} s ago")

    # ---- services -------------------------------------------------------

    def on_open_session(self, request: OpenSession.Request, response: OpenSession.Response) -> OpenSession.Response:
        open_request = wire.open_request_from_msg(request)
        load = ServerLoad(
            ready=self.ready,
            draining=self.draining,
            active_sessions=self.sessions.count(excluding_client=request.client_id),
            max_sessions=self.max_sessions,
        )
        admission = admit(self.capabilities, open_request, load, strict_fps=self.params["strict_fps"])
        response.capabilities = self.capabilities_msg
        response.max_sessions = self.max_sessions
        if not admission.accepted:
            response.accepted, response.refusal, response.message = False, int(admission.refusal), admission.message
            response.active_sessions = load.active_sessions
            self.get_logger().warning(f"refused session for {shown(request.client_id)}: {admission.message}")
            return response
        session = Session(
            client_id=request.client_id,
            task=admission.task or self.params["default_task"],
            fps=request.fps,
            rtc_enabled=admission.rtc_enabled,
            opened_at=time.monotonic(),
        )
        session.processors = self.runner.new_session_processors()
        # The policy itself (exclusive mode) is reset by the worker thread,
        # the only one that touches it, before this session's first request.
        session.processors_stale = True
        replaced = self.sessions.open(session)
        observation_topic, action_chunk_topic = self._create_data_plane(session)
        if replaced is not None:
            self.scheduler.remove(session.client_id)  # its waiting observation belongs to the old session
        response.accepted, response.refusal = True, int(Refusal.NONE)
        response.warnings = list(admission.warnings)
        response.session_id = session.session_id
        response.rtc_enabled = admission.rtc_enabled
        response.observation_topic, response.action_chunk_topic = observation_topic, action_chunk_topic
        response.active_sessions = self.sessions.count()
        self.get_logger().info(
            f"session {session.session_id} opened for {request.client_id}"
            + (" (replacing its previous session)" if replaced else "")
            + (f"; warnings: {'; '.join(admission.warnings)}" if admission.warnings else "")
        )
        return response

    def _named_session(self, client_id: str, session_id: str) -> tuple[Session | None, str]:
        """The client's open session if it is ``session_id``; else None and why."""
        session = self.sessions.get(client_id)
        if session is not None and session.session_id == session_id:
            return session, ""
        # Ids as the robot sent them, however long: shown cut, never echoed whole.
        return None, f"no open session {shown(session_id)} for client {shown(client_id)}" + (
            f" (its open session is {session.session_id!r})" if session else ""
        )

    def on_close_session(self, request: CloseSession.Request, response: CloseSession.Response) -> CloseSession.Response:
        session, response.message = self._named_session(request.client_id, request.session_id)
        if session is None:
            response.success = False
            return response
        response.success = self._end_session(session, "closed by the client")
        return response

    def on_reset_episode(self, request: ResetEpisode.Request, response: ResetEpisode.Response) -> ResetEpisode.Response:
        session, response.message = self._named_session(request.client_id, request.session_id)
        if session is None:
            response.success = False
            return response
        response.episode = session.episode
        if request.episode == session.episode:
            # Idempotent: a repeated call, or an observation of the new episode overtook it.
            response.success = True
            return response
        if request.episode <= session.episode:
            response.success = False
            response.message = f"episode {request.episode} is not after the current episode {session.episode}"
            return response
        session.episode, session.processors_stale = request.episode, True
        response.success, response.episode = True, request.episode
        return response

    # ---- observability --------------------------------------------------

    def health(self) -> ServerHealth:
        p50, p95 = self.stats.inference_percentiles_ms()
        return ServerHealth(
            instance_id=self.instance_id,
            server_namespace=self.namespace_name(),
            heartbeat_seq=self.heartbeat_seq,
            ready=self.ready,
            draining=self.draining,
            uptime_s=time.monotonic() - self.started,
            active_sessions=self.sessions.count(),
            max_sessions=self.max_sessions,
            pending_requests=self.scheduler.pending(),
            utilization=self.stats.utilization(),
            requests_served=self.stats.requests_served,
            requests_rejected=self.stats.requests_rejected + self.stats.requests_failed,
            observations_superseded=self.stats.observations_superseded,
            inference_ms_p50=p50,
            inference_ms_p95=p95,
        )

    def status_msg(self) -> ServerStatus:
        return wire.server_status_to_msg(self.health(), self.capabilities_msg, self.get_clock().now().to_msg())

    def on_heartbeat(self) -> None:
        self.heartbeat_seq += 1
        self.status_pub.publish(self.status_msg())

    def on_get_status(self, request: GetStatus.Request, response: GetStatus.Response) -> GetStatus.Response:
        response.status = self.status_msg()
        return response

    def on_diagnostics(self) -> None:
        health = self.health()
        if health.draining:
            level, message = DiagnosticStatus.WARN, "draining"
        elif health.utilization > 0.8:
            level, message = DiagnosticStatus.WARN, f"inference worker {health.utilization:.0%} busy"
        else:
            level, message = DiagnosticStatus.OK, f"serving {health.active_sessions}/{health.max_sessions} sessions"
        status = wire.diagnostic_status(
            f"{self.get_name()}: policy server", self.capabilities.model_fingerprint, level, message,
            wire.health_values(health) | {"policy_type": self.capabilities.policy_type},
        )
        array = DiagnosticArray(status=[status])
        array.header.stamp = self.get_clock().now().to_msg()
        self.diagnostics_pub.publish(array)

    def health_snapshot(self):
        health = self.health()
        return HealthSnapshot(
            ready=health.ready,
            draining=health.draining,
            detail={"instance_id": health.instance_id, "policy_type": self.capabilities.policy_type,
                    "model_fingerprint": self.capabilities.model_fingerprint},
            metrics=[
                Metric(name, help_text, kind, float(getattr(health, field)))
                for name, help_text, kind, field in SERVER_METRICS
            ],
        )

    # ---- shutdown -------------------------------------------------------

    def destroy_node(self) -> None:
        # Also reached without a drain (context shut down from outside):
        # every close below is idempotent.
        if getattr(self, "worker", None) is not None:
            self.worker.stop()
            self.worker.join(timeout=DRAIN_TIMEOUT_S)
        self._close_observability()
        super().destroy_node()

    def _close_observability(self) -> None:
        for resource in (getattr(self, "audit", None), getattr(self, "capture", None)):
            if resource is not None:
                resource.close()
        if getattr(self, "http", None) is not None:
            self.http.stop()

    def on_stop_requested(self) -> None:
        """From the signal handler: refuse new sessions from this moment on."""
        self.draining = True

    def drain(self, spin_once) -> None:
        """Stop the heartbeat, refuse new sessions, finish the in-flight request."""
        self.get_logger().info("draining: heartbeat stopped, new sessions refused, finishing the in-flight request")
        self.destroy_timer(self.heartbeat_timer)
        self.draining = True
        self.worker.stop()
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while self.worker.is_alive() and time.monotonic() < deadline:
            spin_once()
        if self.worker.is_alive():
            self.get_logger().error(f"the in-flight request did not finish within {DRAIN_TIMEOUT_S:.0f} s")
        self._close_observability()
        self.get_logger().info(f"drained after {self.stats.requests_served} requests served")


def main(args: list[str] | None = None) -> None:
    sys.exit(run_node(PolicyServerNode, args))


if __name__ == "__main__":
    main()
