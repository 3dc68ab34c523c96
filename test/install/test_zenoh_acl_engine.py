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

import time
from pathlib import Path

import pytest

from lerobot_ros.protocol import names
from lerobot_ros.zenoh_deployment import issue, make_ca
from support.ros import free_port

zenoh = pytest.importorskip(
    "zenoh", reason="eclipse-zenoh is not installed: the ACL cannot be run in the engine"
)
from support.zenoh_engine import (  # noqa: E402 - only once zenoh is known to import
    CONFIG_DIR,
    HASH,
    Inbox,
    Sessions,
    answers,
    chunk_key,
    deliver,  # noqa: E402
    flatten,
    get,
    local_config,
    observation_key,
    put,
)

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_zenoh_acl_engine")

# --- certificates, made here with the openssl CLI (by the generator's own functions)
# ----------------


@pytest.fixture(scope="module")
def tls_dir(tmp_path_factory) -> Path:
    """A private CA, the GPU router's certificate (for 127.0.0.1) and two robots' (CN = client
    id)."""
    directory = tmp_path_factory.mktemp("zenoh_tls")
    make_ca(directory, days=2)
    issue(directory, directory, "router", "gpu0-router", "DNS:localhost,IP:127.0.0.1", days=2)
    for robot in ("arm_1", "arm_2"):
        issue(directory, directory, robot, robot, f"DNS:{robot}", days=2)
    return directory


# --- the router and its sessions
# ------------------------------------------------------------------


def router_config(shipped: str, tls_dir: Path, tcp_port: int, tls_port: int) -> "zenoh.Config":
    """The shipped file, with only the listen endpoints, certificate paths and fleet peers
    changed."""
    config = zenoh.Config.from_file(str(CONFIG_DIR / shipped))
    put(config, "listen/endpoints", [f"tcp/127.0.0.1:{tcp_port}", f"tls/127.0.0.1:{tls_port}"])
    if get(config, "connect/endpoints"):
        put(config, "connect/endpoints", [])  # the other GPU machines of a fleet do not exist here
    tls = get(config, "transport/link/tls")
    for field in (
        "root_ca_certificate",
        "listen_private_key",
        "listen_certificate",
        "connect_private_key",
        "connect_certificate",
    ):
        if tls.get(field):
            name = (
                "ca.pem" if field == "root_ca_certificate" else "router" + Path(tls[field]).suffix
            )
            put(config, f"transport/link/tls/{field}", str(tls_dir / name))
    return config


def robot_config(tls_dir: Path, robot: str, tls_port: int) -> "zenoh.Config":
    """A robot's link to the GPU router, as router_robot.json5 makes it: TLS, its own
    certificate."""
    config = zenoh.Config()
    put(config, "mode", "client")
    put(config, "connect/endpoints", [f"tls/127.0.0.1:{tls_port}"])
    put(config, "scouting/multicast/enabled", False)
    put(
        config,
        "transport/link/tls",
        {
            "root_ca_certificate": str(tls_dir / "ca.pem"),
            "connect_private_key": str(tls_dir / f"{robot}.key"),
            "connect_certificate": str(tls_dir / f"{robot}.pem"),
            "enable_mtls": True,
        },
    )
    return config


@pytest.fixture
def sessions():
    opened = Sessions()
    yield opened
    opened.close()


# What a test machine must change, and nothing else (the fleet's peers do not exist here).
CHANGED = {
    "listen/endpoints",
    "connect/endpoints",
    "transport/link/tls/root_ca_certificate",
    "transport/link/tls/listen_private_key",
    "transport/link/tls/listen_certificate",
    "transport/link/tls/connect_private_key",
    "transport/link/tls/connect_certificate",
}
SHIPPED = {"router_server.json5": "lerobot", "router_fleet_server.json5": "gpu0/lerobot"}
TOP_LEVEL = ("mode", "listen", "connect", "scouting", "transport", "access_control")


@pytest.mark.parametrize("shipped", SHIPPED)
def test_the_router_under_test_runs_the_shipped_access_control(shipped, tls_dir):
    original = zenoh.Config.from_file(str(CONFIG_DIR / shipped))
    derived = router_config(shipped, tls_dir, free_port(), free_port())
    assert get(derived, "access_control") == get(original, "access_control")
    before = dict(item for part in TOP_LEVEL for item in flatten(get(original, part), part))
    after = dict(item for part in TOP_LEVEL for item in flatten(get(derived, part), part))
    assert {
        path for path in before.keys() | after.keys() if before.get(path) != after.get(path)
    } <= CHANGED
    local = next(
        subject for subject in get(derived, "access_control/subjects") if subject["id"] == "local"
    )
    assert local["interfaces"] == ["lo"] and local["link_protocols"] == ["tcp"]


def _start(router, tls_dir, sessions):
    """A router from ``router(tcp_port, tls_port)``, two local processes on it and the two
    robots."""
    tcp_port, tls_port = free_port(), free_port()
    sessions(router(tcp_port, tls_port))
    opened = {name: sessions(local_config(tcp_port)) for name in ("server", "other_local_process")}
    opened.update(
        {robot: sessions(robot_config(tls_dir, robot, tls_port)) for robot in ("arm_1", "arm_2")}
    )
    return opened


@pytest.mark.parametrize("shipped", SHIPPED)
def test_a_robot_uses_only_its_own_data_plane_in_the_engine(shipped, tls_dir, sessions):
    """arm_1 (robot A) against arm_2 (robot B); the trusted side is the local server process."""
    namespace = SHIPPED[shipped]
    # router_server.json5 ships arm_1 only
    fleet_knows_arm_2 = shipped == "router_fleet_server.json5"
    opened = _start(lambda tcp, tls: router_config(shipped, tls_dir, tcp, tls), tls_dir, sessions)
    local, arm_1, arm_2 = opened["server"], opened["arm_1"], opened["arm_2"]
    obs_1, obs_2 = observation_key("arm_1", namespace), observation_key("arm_2", namespace)
    chunk_1, chunk_2 = chunk_key("arm_1", namespace), chunk_key("arm_2", namespace)

    # Observations: the server subscribes to both robots'; arm_1 publishes on its own and on
    # arm_2's.
    at_server = Inbox()
    for key in (obs_1, obs_2):
        local.declare_subscriber(key, at_server)
    denied = [(arm_1, obs_2)] + ([] if fleet_knows_arm_2 else [(arm_2, obs_2)])
    assert deliver(arm_1, obs_1, at_server, denied), (
        "arm_1's own observation did not reach the server"
    )
    assert not at_server.got(obs_2), (
        "arm_2's observation topic took a put from arm_1 (or from unlisted arm_2)"
    )
    if fleet_knows_arm_2:  # the same put, by the robot the fleet ACL lists for it, is delivered
        assert deliver(arm_2, obs_2, at_server), "arm_2's own observation did not reach the server"

    # Chunks: arm_1 subscribes to its own, to arm_2's, and to every robot's by wildcard.
    at_arm_1, by_wildcard = Inbox(), Inbox()
    arm_1.declare_subscriber(chunk_1, at_arm_1)
    arm_1.declare_subscriber(chunk_2, at_arm_1)
    arm_1.declare_subscriber(f"*/{namespace}/clients/**", by_wildcard)
    assert deliver(local, chunk_1, at_arm_1, [(local, chunk_2)]), (
        "the server's chunk did not reach arm_1"
    )
    assert not at_arm_1.got(chunk_2), "arm_1 received arm_2's chunks"
    # (its own chunks reach the wildcard subscriber too, inside arm_1's session: they were routed
    # to arm_1)
    assert not by_wildcard.got(chunk_2), "arm_1 read arm_2's chunks by wildcard"
    assert set(by_wildcard.keys) <= {chunk_1}, (
        f"arm_1 read by wildcard: {sorted(set(by_wildcard.keys))}"
    )

    # Services: arm_1 may call open_session, but not answer it in the server's place.
    service = f"0/{namespace}/{names.OPEN_SESSION}/lerobot_ros::srv::dds_::OpenSession_/{HASH}"
    local.declare_queryable(service, lambda query: query.reply(service, b"server"))
    arm_1.declare_queryable(service, lambda query: query.reply(service, b"forged by arm_1"))
    time.sleep(0.3)  # lets a declaration that were allowed reach the router
    assert answers(arm_1, service) == [b"server"], "arm_1 could not call the server's open_session"
    assert answers(opened["other_local_process"], service) == [b"server"], (
        "arm_1 answered open_session in the server's place"
    )


def test_the_checks_catch_a_tls_robot_on_loopback_trusted_as_local(tls_dir, sessions):
    """The control: with the ``local`` subject as it was (any link on lo), the same checks see the
    leak.

    A robot whose TLS link reaches the router through loopback (an SSH
    tunnel, a port forward, or this test) then matched ``local`` and got
    everything; ``link_protocols: ["tcp"]`` in the shipped file is what stops it.
    """

    def router_as_before(tcp_port, tls_port):
        config = router_config("router_server.json5", tls_dir, tcp_port, tls_port)
        subjects = get(config, "access_control/subjects")
        for subject in subjects:
            if subject["id"] == "local":
                subject["link_protocols"] = None
        put(config, "access_control/subjects", subjects)
        return config

    opened = _start(router_as_before, tls_dir, sessions)
    local, arm_1 = opened["server"], opened["arm_1"]
    leaked = Inbox()
    arm_1.declare_subscriber(chunk_key("arm_2"), leaked)
    assert deliver(local, chunk_key("arm_2"), leaked), (
        "the control failed: arm_1 did not get arm_2's chunks"
    )
    service = f"0/lerobot/{names.OPEN_SESSION}/lerobot_ros::srv::dds_::OpenSession_/{HASH}"
    arm_1.declare_queryable(service, lambda query: query.reply(service, b"forged by arm_1"))
    time.sleep(0.3)
    assert answers(opened["other_local_process"], service) == [b"forged by arm_1"], (
        "the control failed"
    )
