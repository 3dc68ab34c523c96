"""The shipped Zenoh access-control list holds in the real Zenoh engine, not only on paper.

A zenoh router runs in this process with the shipped router configuration;
only what a test machine must change is changed (listen endpoints on free
loopback ports, certificate paths to certificates made here, no fleet peers
to dial), and the test asserts the whole ``access_control`` section it runs
is the shipped one. Robots connect as zenoh clients over TLS with mutual
authentication, each with a certificate whose common name is its client id,
the way ``router_robot.json5`` connects; the trusted side is a session of
``session.json5`` over the loopback TCP listener, the way local ROS
processes (policy_server_node) reach the router. Keys are built the way
rmw_zenoh names topics: <domain id>/<topic>/<type>/<type hash>.

Everything runs on loopback. That is an honest test of the shipped file only
because its ``local`` subject (everything allowed) is loopback *TCP*
(``link_protocols: ["tcp"]``): a TLS link on lo is held to its certificate's
policy, as a robot's link through an SSH tunnel must be. The last test is the
control: with ``local`` as it was before (any link on lo), the same checks
see arm_1 read arm_2's chunks and answer open_session in the server's place.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest
from support.paths import REPO
from support.ros import free_port

from lerobot_ros import names

zenoh = pytest.importorskip("zenoh", reason="eclipse-zenoh is not installed: the ACL cannot be run in the engine")

CONFIG_DIR = REPO / "config" / "zenoh"
HASH = "RIHS01_" + "cd" * 32
DELIVERY_BOUND_S = 5.0  # a permitted message must arrive within this
SILENCE_S = 1.0  # a denied one must not arrive while permitted traffic on the same sessions flows this long


# --- keys, as rmw_zenoh names them ---------------------------------------------------------------

def topic_key(namespace: str, topic: str, type_name: str, domain: int = 0) -> str:
    return f"{domain}/{namespace}/{topic}/lerobot_ros::msg::dds_::{type_name}_/{HASH}"


def observation_key(client_id: str, namespace: str = "lerobot") -> str:
    return topic_key(namespace, names.observation_topic(client_id), "Observation")


def chunk_key(client_id: str, namespace: str = "lerobot") -> str:
    return topic_key(namespace, names.action_chunk_topic(client_id), "ActionChunk")


# --- certificates, made here with the openssl CLI -------------------------------------------------

def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _issue(directory: Path, name: str, common_name: str, alt_names: str) -> None:
    (directory / f"{name}.ext").write_text(
        "basicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=serverAuth,clientAuth\n"
        f"subjectAltName={alt_names}\n")
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={common_name}", cwd=directory)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.pem", cwd=directory)


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory) -> Path:
    """A private CA, the GPU router's certificate (for 127.0.0.1) and two robots' (CN = client id)."""
    directory = tmp_path_factory.mktemp("zenoh_tls")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=lerobot_ros test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
             cwd=directory)
    _issue(directory, "router", "gpu0-router", "DNS:localhost,IP:127.0.0.1")
    for robot in ("arm_1", "arm_2"):
        _issue(directory, robot, robot, f"DNS:{robot}")
    return directory


# --- the router and its sessions ------------------------------------------------------------------

def _json(config, path):
    return json.loads(config.get_json(path))


def _set(config, path, value) -> None:
    config.insert_json5(path, json.dumps(value))


def router_config(shipped: str, tls_dir: Path, tcp_port: int, tls_port: int) -> "zenoh.Config":
    """The shipped file, with only the listen endpoints, certificate paths and fleet peers changed."""
    config = zenoh.Config.from_file(str(CONFIG_DIR / shipped))
    _set(config, "listen/endpoints", [f"tcp/127.0.0.1:{tcp_port}", f"tls/127.0.0.1:{tls_port}"])
    if _json(config, "connect/endpoints"):
        _set(config, "connect/endpoints", [])  # the other GPU machines of a fleet do not exist here
    tls = _json(config, "transport/link/tls")
    for field in ("root_ca_certificate", "listen_private_key", "listen_certificate",
                  "connect_private_key", "connect_certificate"):
        if tls.get(field):
            name = "ca.pem" if field == "root_ca_certificate" else "router" + Path(tls[field]).suffix
            _set(config, f"transport/link/tls/{field}", str(tls_dir / name))
    return config


def robot_config(tls_dir: Path, robot: str, tls_port: int) -> "zenoh.Config":
    """A robot's link to the GPU router, as router_robot.json5 makes it: TLS, its own certificate."""
    config = zenoh.Config()
    _set(config, "mode", "client")
    _set(config, "connect/endpoints", [f"tls/127.0.0.1:{tls_port}"])
    _set(config, "scouting/multicast/enabled", False)
    _set(config, "transport/link/tls", {
        "root_ca_certificate": str(tls_dir / "ca.pem"),
        "connect_private_key": str(tls_dir / f"{robot}.key"),
        "connect_certificate": str(tls_dir / f"{robot}.pem"),
        "enable_mtls": True,
    })
    return config


def local_config(tcp_port: int) -> "zenoh.Config":
    """session.json5, the config of every local ROS process, pointed at this router, loopback only."""
    config = zenoh.Config.from_file(str(CONFIG_DIR / "session.json5"))
    _set(config, "connect/endpoints", [f"tcp/127.0.0.1:{tcp_port}"])
    _set(config, "listen/endpoints", ["tcp/127.0.0.1:0"])
    return config


class Inbox:
    """Samples received by one subscriber, keyed by key expression."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self.keys: list[str] = []

    def __call__(self, sample) -> None:
        with self._lock:
            self.keys.append(str(sample.key_expr))
            self._lock.notify_all()

    def got(self, key: str) -> bool:
        with self._lock:
            return key in self.keys

    def wait_for(self, key: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._lock:
            while key not in self.keys:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
            return True


def deliver(publisher, permitted: str, inbox: Inbox, denied=()) -> bool:
    """Put on ``permitted`` until it arrives in ``inbox``, sending each ``denied`` (session, key) alongside.

    Returns whether ``permitted`` arrived within DELIVERY_BOUND_S. After it
    arrives the puts go on for SILENCE_S, so that a denied message, sent over
    sessions and routes shown to work, has had that long to arrive: the
    caller then checks it did not, with ``inbox.got``.
    """
    deadline = time.monotonic() + DELIVERY_BOUND_S
    arrived = False
    while time.monotonic() < deadline:
        publisher.put(permitted, b"permitted")
        for session, key in denied:
            session.put(key, b"denied")
        if not arrived and inbox.wait_for(permitted, 0.05):
            arrived = True
            deadline = time.monotonic() + (SILENCE_S if denied else 0.0)
    return arrived


@pytest.fixture
def sessions():
    opened = []

    def open_(config):
        session = zenoh.open(config)
        opened.append(session)
        return session

    yield open_
    for session in reversed(opened):
        session.close()



def _flatten(value, prefix=""):
    if isinstance(value, dict):
        for name, item in value.items():
            yield from _flatten(item, f"{prefix}/{name}" if prefix else name)
    else:
        yield prefix, value


# What a test machine must change, and nothing else (the fleet's peers do not exist here).
CHANGED = {"listen/endpoints", "connect/endpoints", "transport/link/tls/root_ca_certificate",
           "transport/link/tls/listen_private_key", "transport/link/tls/listen_certificate",
           "transport/link/tls/connect_private_key", "transport/link/tls/connect_certificate"}
SHIPPED = {"router_server.json5": "lerobot", "router_fleet_server.json5": "gpu0/lerobot"}
TOP_LEVEL = ("mode", "listen", "connect", "scouting", "transport", "access_control")


@pytest.mark.parametrize("shipped", SHIPPED)
def test_the_router_under_test_runs_the_shipped_access_control(shipped, tls_dir):
    original = zenoh.Config.from_file(str(CONFIG_DIR / shipped))
    derived = router_config(shipped, tls_dir, free_port(), free_port())
    assert _json(derived, "access_control") == _json(original, "access_control")
    before = dict(item for part in TOP_LEVEL for item in _flatten(_json(original, part), part))
    after = dict(item for part in TOP_LEVEL for item in _flatten(_json(derived, part), part))
    assert {path for path in before.keys() | after.keys() if before.get(path) != after.get(path)} <= CHANGED
    local = next(subject for subject in _json(derived, "access_control/subjects") if subject["id"] == "local")
    assert local["interfaces"] == ["lo"] and local["link_protocols"] == ["tcp"]


def _start(router, tls_dir, sessions):
    """A router from ``router(tcp_port, tls_port)``, two local processes on it and the two robots."""
    tcp_port, tls_port = free_port(), free_port()
    sessions(router(tcp_port, tls_port))
    opened = {name: sessions(local_config(tcp_port)) for name in ("server", "other_local_process")}
    opened.update({robot: sessions(robot_config(tls_dir, robot, tls_port)) for robot in ("arm_1", "arm_2")})
    return opened


@pytest.mark.parametrize("shipped", SHIPPED)
def test_a_robot_uses_only_its_own_data_plane_in_the_engine(shipped, tls_dir, sessions):
    """arm_1 (robot A) against arm_2 (robot B); the trusted side is the local server process."""
    namespace = SHIPPED[shipped]
    fleet_knows_arm_2 = shipped == "router_fleet_server.json5"  # router_server.json5 ships arm_1 only
    opened = _start(lambda tcp, tls: router_config(shipped, tls_dir, tcp, tls), tls_dir, sessions)
    local, arm_1, arm_2 = opened["server"], opened["arm_1"], opened["arm_2"]
    obs_1, obs_2 = observation_key("arm_1", namespace), observation_key("arm_2", namespace)
    chunk_1, chunk_2 = chunk_key("arm_1", namespace), chunk_key("arm_2", namespace)

    # Observations: the server subscribes to both robots'; arm_1 publishes on its own and on arm_2's.
    at_server = Inbox()
    for key in (obs_1, obs_2):
        local.declare_subscriber(key, at_server)
    denied = [(arm_1, obs_2)] + ([] if fleet_knows_arm_2 else [(arm_2, obs_2)])
    assert deliver(arm_1, obs_1, at_server, denied), "arm_1's own observation did not reach the server"
    assert not at_server.got(obs_2), "arm_2's observation topic took a put from arm_1 (or from unlisted arm_2)"
    if fleet_knows_arm_2:  # the same put, by the robot the fleet ACL lists for it, is delivered
        assert deliver(arm_2, obs_2, at_server), "arm_2's own observation did not reach the server"

    # Chunks: arm_1 subscribes to its own, to arm_2's, and to every robot's by wildcard.
    at_arm_1, by_wildcard = Inbox(), Inbox()
    arm_1.declare_subscriber(chunk_1, at_arm_1)
    arm_1.declare_subscriber(chunk_2, at_arm_1)
    arm_1.declare_subscriber(f"*/{namespace}/clients/**", by_wildcard)
    assert deliver(local, chunk_1, at_arm_1, [(local, chunk_2)]), "the server's chunk did not reach arm_1"
    assert not at_arm_1.got(chunk_2), "arm_1 received arm_2's chunks"
    # (its own chunks reach the wildcard subscriber too, inside arm_1's session: they were routed to arm_1)
    assert not by_wildcard.got(chunk_2), "arm_1 read arm_2's chunks by wildcard"
    assert set(by_wildcard.keys) <= {chunk_1}, f"arm_1 read by wildcard: {sorted(set(by_wildcard.keys))}"

    # Services: arm_1 may call open_session, but not answer it in the server's place.
    service = f"0/{namespace}/{names.OPEN_SESSION}/lerobot_ros::srv::dds_::OpenSession_/{HASH}"
    local.declare_queryable(service, lambda query: query.reply(service, b"server"))
    arm_1.declare_queryable(service, lambda query: query.reply(service, b"forged by arm_1"))
    time.sleep(0.3)  # lets a declaration that were allowed reach the router
    assert _answers(arm_1, service) == [b"server"], "arm_1 could not call the server's open_session"
    assert _answers(opened["other_local_process"], service) == [b"server"], \
        "arm_1 answered open_session in the server's place"


def _answers(session, selector) -> list[bytes]:
    """Every reply to one query from every queryable outside ``session``, unconsolidated."""
    replies = session.get(selector, target=zenoh.QueryTarget.ALL, consolidation=zenoh.ConsolidationMode.NONE,
                          allowed_destination=zenoh.Locality.REMOTE, timeout=2.0)
    return sorted(reply.ok.payload.to_bytes() for reply in replies if reply.ok is not None)


def test_the_checks_catch_a_tls_robot_on_loopback_trusted_as_local(tls_dir, sessions):
    """The control: with the ``local`` subject as it was (any link on lo), the same checks see the leak.

    A robot whose TLS link reaches the router through loopback (an SSH
    tunnel, a port forward, or this test) then matched ``local`` and got
    everything; ``link_protocols: ["tcp"]`` in the shipped file is what stops it.
    """
    def router_as_before(tcp_port, tls_port):
        config = router_config("router_server.json5", tls_dir, tcp_port, tls_port)
        subjects = _json(config, "access_control/subjects")
        for subject in subjects:
            if subject["id"] == "local":
                subject["link_protocols"] = None
        _set(config, "access_control/subjects", subjects)
        return config

    opened = _start(router_as_before, tls_dir, sessions)
    local, arm_1 = opened["server"], opened["arm_1"]
    leaked = Inbox()
    arm_1.declare_subscriber(chunk_key("arm_2"), leaked)
    assert deliver(local, chunk_key("arm_2"), leaked), "the control failed: arm_1 did not get arm_2's chunks"
    service = f"0/lerobot/{names.OPEN_SESSION}/lerobot_ros::srv::dds_::OpenSession_/{HASH}"
    arm_1.declare_queryable(service, lambda query: query.reply(service, b"forged by arm_1"))
    time.sleep(0.3)
    assert _answers(opened["other_local_process"], service) == [b"forged by arm_1"], "the control failed"
