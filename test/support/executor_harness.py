"""The executor's core and network worker in the test process, against a fake server link.

``connected()`` gives a core that has completed its handshake with
``FakeLink``, a server that answers every observation at once (or never, when
``silent``), on a hand-stepped ``Clock``: the network boundary is the fake,
everything behind it is the product's own code.
"""

from __future__ import annotations

import numpy as np
from sensor_msgs.msg import Image

from lerobot_ros.executor.core import ExecutorCore
from lerobot_ros.executor.fleet.status_round import ask_all
from lerobot_ros.executor.requests.answer_rules import ValidatedModel
from lerobot_ros.executor.requests.network_worker import NetworkWorker
from lerobot_ros.executor.session.handshake import handshake
from lerobot_ros.executor.session.handshake_types import RobotDeclaration, ServerView, SessionGrant
from lerobot_ros.executor.settings import PARAMETERS, ExecutorSettings
from lerobot_ros.node_shell.parameters import defaults
from lerobot_ros.protocol.contract import CameraSpec, ServerCapabilities
from lerobot_ros.protocol.telemetry import ServerHealth
from lerobot_ros.protocol.wire.data_plane import ReceivedChunk, RequestId

JOINTS = ("a", "b", "c")
CAMERA = "observation.images.front"
MODEL = ValidatedModel("f" * 16, "", JOINTS)


def params(**overrides) -> dict:
    values = defaults(PARAMETERS)
    values.update(
        joint_names=list(JOINTS), camera_names=[CAMERA], camera_topics=["/cam"], client_id="arm"
    )
    values.update(overrides)
    return values


def settings(**overrides):
    return ExecutorSettings.from_values(params(**overrides), node_namespace="/", hostname="host")


def chunk(request: RequestId, actions=None, **fields) -> ReceivedChunk:
    actions = np.zeros((5, 3), np.float32) if actions is None else np.asarray(actions, np.float32)
    values = dict(
        request=request,
        status=0,
        error="",
        model_fingerprint=MODEL.fingerprint,
        action_names=JOINTS,
        actions_model=actions,
        actions_robot=actions,
        rtc_applied=False,
        inference_delay_steps=0,
    )
    values.update(fields)
    return ReceivedChunk(**values)


CAPABILITIES = ServerCapabilities(
    model_id="m",
    model_fingerprint=MODEL.fingerprint,
    policy_type="act",
    action_names=JOINTS,
    state_dim=3,
    cameras=(CameraSpec(CAMERA, 8, 8),),
    chunk_size=10,
    trained_fps=10.0,
)


class FakeLink:
    """A server that answers every observation at once (or never, when ``silent``)."""

    def __init__(self, core: ExecutorCore, capabilities=CAPABILITIES) -> None:
        self.core, self.capabilities = core, capabilities
        self.silent = False
        self.latency_s = 0.02  # the round trip each answer reports (received - sent)
        self.refusal = ""  # answer every observation REJECTED with this reason
        self.instance = "i1"
        self.sent: list = []
        self.sessions = 0
        # granted with every session, as a server's session_idle_timeout_s
        self.idle_timeout_s = 10.0
        # a deactivated server: GetStatus not ready (drain flag kept), OpenSession refused
        self.inactive = False

    namespaces = ("/lerobot",)
    discovers = False

    #: What policy_server_node's OpenSession answers while inactive
    # (server/lifecycle.not_serving_reason).
    INACTIVE = (
        "the server is inactive (lifecycle state 'inactive'): it serves again once activated "
        "(ros2 lifecycle set <node> activate); try another replica meanwhile"
    )

    def get_status(self, namespace, timeout_s):
        if self.inactive:
            return ServerView(False, self.instance, self.capabilities, draining=True)
        return ServerView(True, self.instance, self.capabilities)

    def get_statuses(self, namespaces, timeout_s):
        return ask_all(
            lambda namespace: self.get_status(namespace, timeout_s), namespaces, timeout_s
        )

    def wait_for_discovery(self, timeout_s):
        pass  # every fake replica is known at once

    def open_session(self, namespace, timeout_s, check):
        if self.inactive:
            return f"session refused: {self.INACTIVE}"
        self.sessions += 1
        grant = SessionGrant(
            f"s{self.sessions}",
            False,
            "/obs",
            "/chunk",
            self.capabilities,
            idle_timeout_s=self.idle_timeout_s,
        )
        return check(grant) or grant

    def send_observation(self, pending):
        self.sent.append(pending)
        if not self.silent:
            actions = np.tile(np.arange(10, dtype=np.float32)[:, None], (1, 3))
            reply = chunk(
                pending.request,
                actions=actions,
                model_fingerprint=self.capabilities.model_fingerprint,
                action_names=self.capabilities.action_names,
                status=1 if self.refusal else 0,
                error=self.refusal,
            )
            self.core.offer_chunk(
                reply, pending.request.sent_monotonic_ns + round(self.latency_s * 1e9)
            )
        return None


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def ns(self) -> int:
        return int(self.t * 1e9)


def connected(idle_timeout_s: float = 10.0, **overrides):
    """A core with a session open on a fake server that grants ``idle_timeout_s``; settings
    ``overrides``."""
    clock = Clock()
    made = settings(fps=10.0, buffer_time_s=0.25, request_timeout_s=0.01, **overrides)
    core = ExecutorCore(made, clock())
    link = FakeLink(core)
    link.idle_timeout_s = idle_timeout_s
    robot = RobotDeclaration(JOINTS, (CAMERA,), 3)
    assert handshake(core, link, robot, clock).accepted
    worker = NetworkWorker(core, link, robot, clock=clock, clock_ns=clock.ns)
    return clock, core, link, worker


def feed(core, clock) -> None:
    core.on_joint_state(["c", "b", "a"], [0.3, 0.2, 0.1], [], clock())
    core.on_camera(CAMERA, Image(), clock())


def counts(core, clock):
    """The core's status snapshot (the telemetry ~/status publishes)."""
    return core.snapshot(clock()).telemetry


def heartbeat(instance_id: str, draining: bool = False) -> ServerHealth:
    """A server's heartbeat as the executor reads it (``control_plane.server_health_from_msg``)."""
    return ServerHealth(
        instance_id=instance_id,
        server_namespace="",
        heartbeat_seq=0,
        ready=not draining,
        draining=draining,
        uptime_s=0.0,
    )
