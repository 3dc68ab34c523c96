"""The shipped rmw_zenoh configs parse with zenoh's own parser and guard the real topics.

Key expressions are built the way rmw_zenoh names entities:
<domain id>/<name without leading slash>/<package>::<msg|srv>::dds_::<Type>_/<type hash>.
"""

import re

import pytest

from lerobot_ros.protocol import names
from support.paths import REPO

zenoh = pytest.importorskip("zenoh")

CONFIGS = sorted((REPO / "config" / "zenoh").glob("*.json5"))
HASH = "RIHS01_" + "ab" * 32
PRIORITY_ORDER = [
    "real_time",
    "interactive_high",
    "interactive_low",
    "data_high",
    "data",
    "data_low",
    "background",
]


def key(name: str, kind: str, type_name: str, domain: int = 0) -> "zenoh.KeyExpr":
    return zenoh.KeyExpr(f"{domain}/lerobot/{name}/lerobot_ros::{kind}::dds_::{type_name}_/{HASH}")


def observation(client_id):
    return key(names.observation_topic(client_id), "msg", "Observation")


def action_chunk(client_id):
    return key(names.action_chunk_topic(client_id), "msg", "ActionChunk")


SERVICE_TYPES = {
    names.GET_STATUS: "GetStatus",
    names.OPEN_SESSION: "OpenSession",
    names.CLOSE_SESSION: "CloseSession",
    names.RESET_EPISODE: "ResetEpisode",
}
REAL_KEYS = [
    observation("arm_1"),
    action_chunk("arm_1"),
    key(names.STATUS, "msg", "ServerStatus"),
    *(key(service, "srv", type_name) for service, type_name in SERVICE_TYPES.items()),
]


def load(name: str) -> "zenoh.Config":
    return zenoh.Config.from_file(str(REPO / "config" / "zenoh" / name))


def json_of(config, path):
    import json

    return json.loads(config.get_json(path))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda path: path.name)
def test_every_config_parses_and_never_scouts_by_multicast(path):
    config = zenoh.Config.from_file(str(path))
    assert json_of(config, "scouting/multicast/enabled") is False


def test_router_configs_use_mutual_tls():
    for name in (
        "router_server.json5",
        "router_robot.json5",
        "router_fleet_server.json5",
        "router_fleet_robot.json5",
    ):
        tls = json_of(load(name), "transport/link/tls")
        assert tls["enable_mtls"] is True and tls["root_ca_certificate"], name


def _allows(rules, key_expr, message):
    return any(
        message in rule["messages"]
        and rule["permission"] == "allow"
        and any(zenoh.KeyExpr(pattern).intersects(key_expr) for pattern in rule["key_exprs"])
        for rule in rules
    )


def test_acl_lets_a_robot_use_only_its_own_data_plane():
    acl = json_of(load("router_server.json5"), "access_control")
    assert acl["enabled"] and acl["default_permission"] == "deny"
    policy = next(policy for policy in acl["policies"] if policy["subjects"] == ["robot_arm_1"])
    rules = [rule for rule in acl["rules"] if rule["id"] in policy["rules"]]
    assert _allows(rules, observation("arm_1"), "put")
    assert _allows(rules, action_chunk("arm_1"), "declare_subscriber")
    assert not _allows(rules, observation("arm_2"), "put"), (
        "arm_1 may publish arm_2's observations"
    )
    assert not _allows(rules, action_chunk("arm_2"), "declare_subscriber"), (
        "arm_1 may read arm_2's chunks"
    )
    for service, type_name in SERVICE_TYPES.items():
        assert _allows(rules, key(service, "srv", type_name), "query"), service
    assert _allows(rules, key(names.STATUS, "msg", "ServerStatus"), "declare_subscriber")


def test_every_acl_and_qos_key_expression_names_a_real_entity():
    patterns = [
        p
        for rule in json_of(load("router_server.json5"), "access_control/rules")
        for p in rule["key_exprs"]
    ]
    patterns += [
        p
        for entry in json_of(load("session.json5"), "qos/publication")
        for p in entry["key_exprs"]
    ]
    for pattern in patterns:
        if pattern in ("**", "@ros2_lv/**"):
            continue
        assert any(zenoh.KeyExpr(pattern).intersects(real) for real in REAL_KEYS), (
            f"{pattern} matches no lerobot_ros entity"
        )


def test_qos_puts_action_chunks_ahead_of_observations():
    publication = json_of(load("session.json5"), "qos/publication")

    def priority_of(key_expr):
        entry = next(
            e
            for e in publication
            if any(zenoh.KeyExpr(p).intersects(key_expr) for p in e["key_exprs"])
        )
        return PRIORITY_ORDER.index(entry["config"]["priority"])

    assert priority_of(action_chunk("arm_7")) < priority_of(observation("arm_7"))
    assert priority_of(key(names.STATUS, "msg", "ServerStatus")) < priority_of(
        observation("arm_7")
    )
    # The replicas of a fleet serve under namespaces of their own (fleet.launch.py:
    # /gpu<i>/lerobot).
    for replica in ("gpu0", "fleet/gpu1"):
        chunk = replica_key(replica, names.action_chunk_topic("arm_7"), "msg", "ActionChunk")
        frames = replica_key(replica, names.observation_topic("arm_7"), "msg", "Observation")
        heartbeat = replica_key(replica, names.STATUS, "msg", "ServerStatus")
        assert priority_of(chunk) < priority_of(frames) and priority_of(heartbeat) < priority_of(
            frames
        ), replica


def test_the_deployment_docs_explain_how_rmw_zenoh_finds_these_files():
    deployment = (REPO / "docs" / "how-to" / "deployment.md").read_text()
    for needle in (
        "ZENOH_ROUTER_CONFIG_URI",
        "ZENOH_SESSION_CONFIG_URI",
        "router_server.json5",
        "session.json5",
    ):
        assert needle in deployment
    assert re.search(r"mTLS|mutual TLS", deployment)


def replica_key(replica: str, name: str, kind: str, type_name: str) -> "zenoh.KeyExpr":
    """An entity of the server under namespace ``/<replica>/lerobot`` (one per GPU in a fleet)."""
    return zenoh.KeyExpr(
        f"0/{replica}/lerobot/{name}/lerobot_ros::{kind}::dds_::{type_name}_/{HASH}"
    )


@pytest.mark.parametrize("robot, other", [("arm_1", "arm_2"), ("arm_2", "arm_1")])
def test_fleet_acl_holds_for_each_robot_on_every_replica(robot, other):
    acl = json_of(load("router_fleet_server.json5"), "access_control")
    assert acl["enabled"] and acl["default_permission"] == "deny"
    policy = next(policy for policy in acl["policies"] if policy["subjects"] == [f"robot_{robot}"])
    rules = [rule for rule in acl["rules"] if rule["id"] in policy["rules"]]
    for replica in ("gpu0", "gpu1", "gpu7"):
        assert _allows(
            rules,
            replica_key(replica, names.observation_topic(robot), "msg", "Observation"),
            "put",
        )
        assert _allows(
            rules,
            replica_key(replica, names.action_chunk_topic(robot), "msg", "ActionChunk"),
            "declare_subscriber",
        )
        assert not _allows(
            rules,
            replica_key(replica, names.observation_topic(other), "msg", "Observation"),
            "put",
        )
        assert not _allows(
            rules,
            replica_key(replica, names.action_chunk_topic(other), "msg", "ActionChunk"),
            "declare_subscriber",
        ), f"{robot} may read {other}'s chunks on {replica}"
        for service, type_name in SERVICE_TYPES.items():
            assert _allows(rules, replica_key(replica, service, "srv", type_name), "query"), (
                service
            )
        assert _allows(
            rules, replica_key(replica, names.STATUS, "msg", "ServerStatus"), "declare_subscriber"
        )


def test_fleet_routers_peer_and_robots_connect_to_several():
    server = load("router_fleet_server.json5")
    assert len(json_of(server, "connect/endpoints")) >= 2, "a GPU router peers with the others"
    peers = next(
        s for s in json_of(server, "access_control/subjects") if s["id"] == "fleet_routers"
    )
    assert peers["cert_common_names"]
    assert len(json_of(load("router_fleet_robot.json5"), "connect/endpoints")) >= 2
    patterns = [p for rule in json_of(server, "access_control/rules") for p in rule["key_exprs"]]
    real = [
        replica_key("gpu0", names.observation_topic("arm_1"), "msg", "Observation"),
        replica_key("gpu0", names.action_chunk_topic("arm_1"), "msg", "ActionChunk"),
        replica_key("gpu0", names.observation_topic("arm_2"), "msg", "Observation"),
        replica_key("gpu0", names.action_chunk_topic("arm_2"), "msg", "ActionChunk"),
        replica_key("gpu0", names.STATUS, "msg", "ServerStatus"),
        *(
            replica_key("gpu0", service, "srv", type_name)
            for service, type_name in SERVICE_TYPES.items()
        ),
    ]
    for pattern in patterns:
        if pattern not in ("**", "@ros2_lv/**"):
            assert any(zenoh.KeyExpr(pattern).intersects(key) for key in real), (
                f"{pattern} matches no fleet entity"
            )


ROUTERS = (
    "router_server.json5",
    "router_robot.json5",
    "router_fleet_server.json5",
    "router_fleet_robot.json5",
)


@pytest.mark.parametrize("name", ROUTERS)
def test_shipped_routers_are_templates_without_host_names_or_system_paths(name):
    """Certificate paths and the hosts a router dials are placeholders ({tls_dir}, {server_host},
    ...), filled in by lerobot_ros.zenoh_deployment or by hand: nothing of one site (a host name,
    /etc) is baked in."""
    config = load(name)
    tls = json_of(config, "transport/link/tls")
    for field in (
        "root_ca_certificate",
        "listen_private_key",
        "listen_certificate",
        "connect_private_key",
        "connect_certificate",
    ):
        if tls.get(field):
            assert tls[field].startswith("{tls_dir}/"), f"{name}: {field} is {tls[field]!r}"
    for endpoint in json_of(config, "connect/endpoints") or []:
        host = endpoint.split("/", 1)[1].rsplit(":", 1)[0]
        assert re.fullmatch(r"\{\w+\}", host), f"{name}: dials {endpoint!r}, not a placeholder"
    text = (REPO / "config" / "zenoh" / name).read_text()
    assert "/etc/" not in text and ".local" not in text, name
    assert "TEMPLATE" in text, f"{name}: the header should say it is a template"


@pytest.mark.parametrize("name", ["router_server.json5", "router_fleet_server.json5"])
def test_robots_learn_where_the_services_are_but_cannot_declare_them(name):
    """A robot behind its own router routes service calls by the server's queryable declarations
    (egress to it); it must never declare one itself (ingress), or it could answer in the server's
    place."""
    acl = json_of(load(name), "access_control")
    policy = next(policy for policy in acl["policies"] if policy["subjects"] == ["robot_arm_1"])
    rules = [rule for rule in acl["rules"] if rule["id"] in policy["rules"]]
    namespace = "gpu0/lerobot" if "fleet" in name else "lerobot"
    service = zenoh.KeyExpr(
        f"0/{namespace}/{names.OPEN_SESSION}/lerobot_ros::srv::dds_::OpenSession_/{HASH}"
    )
    declaring = [
        rule
        for rule in rules
        if "declare_queryable" in rule["messages"]
        and rule["permission"] == "allow"
        and any(zenoh.KeyExpr(pattern).intersects(service) for pattern in rule["key_exprs"])
    ]
    assert declaring and all(rule["flows"] == ["egress"] for rule in declaring), declaring


@pytest.mark.parametrize("name", ["router_server.json5", "router_fleet_server.json5"])
def test_trusted_processes_reach_the_ros_graph(name):
    """rmw_zenoh's graph lives under @ros2_lv, which "**" does not match (a chunk starting with '@'
    is verbatim):
    the rule of the trusted local processes must name it, or robots never discover the server's
    entities."""
    acl = json_of(load(name), "access_control")
    policy = next(policy for policy in acl["policies"] if policy["subjects"] == ["local"])
    rules = [rule for rule in acl["rules"] if rule["id"] in policy["rules"]]
    token = zenoh.KeyExpr("@ros2_lv/0/aabbccdd/0/11/MP/%/%/lerobot/status")
    assert not zenoh.KeyExpr("**").intersects(token)
    assert _allows(rules, token, "liveliness_token") and _allows(
        rules, token, "declare_liveliness_subscriber"
    )
