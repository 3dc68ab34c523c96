"""deploy/kubernetes rendered by kubectl's kustomize and checked against the Kubernetes schemas and
the server.

The commands are read from docs/how-to/deployment.md (the block marked ``<!-- commands: run by
test/install/test_kubernetes.py -->``) and run as written in a scratch copy of deploy/ (the
certificate generator, zenoh_secrets.py, ``kubectl kustomize``; ``.venv/bin/python`` and
``kubectl`` are this venv's). Every rendered document is validated, strictly (no field the schema
does not know), with kubernetes-validate's offline schemas of the oldest Kubernetes the manifests
need and the newest it ships. Then what the manifests say is held to what the server does: the
probes' paths answer as the probes expect on a real endpoint, the ConfigMap's parameters are the
server's parameter table and pass its checks, the termination grace covers its drain, one GPU per
pod, two routers peered with each other, disruption budgets, and only the mTLS port leaves the
cluster. The routers' generated config is run in the real Zenoh engine: a server session (client
mode, plain TCP, as in a pod) behind one router reaches a robot behind the other over mTLS, and the
robot's ACL still holds.

What this cannot show: a cluster (scheduling, the GPU device plugin, probes and drains timed by a
kubelet), GPUs, several machines, and the image, which is not built here (no container runtime).
"""

from __future__ import annotations

import base64
import copy
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lerobot_ros.json5_reader import read_json5
from support.doc_commands import block_run_by, without, words
from support.paths import REPO

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_kubernetes")

PAGE = REPO / "docs/how-to/deployment.md"
DEPLOY = REPO / "deploy"
KUBECTL = Path(sys.executable).parent / "kubectl"
#: The oldest Kubernetes the manifests need (the StatefulSet pod-index label, which names each
#: server's namespace, is on by default from 1.28) and the newest kubernetes-validate 1.37.0 ships
#: schemas for.
KUBERNETES_VERSIONS = ("1.28.0", "1.37.0")

try:
    import kubernetes_validate
except ImportError:  # pragma: no cover - the development venv always has it
    kubernetes_validate = None


def _require_tools() -> None:
    if kubernetes_validate is None or not KUBECTL.is_file():
        pytest.fail(
            "kubectl or kubernetes-validate is missing from this venv: setup.py's `kubernetes` "
            "extra, "
            "which scripts/setup_env.sh installs (run it)"
        )


def page_commands() -> list[list[str]]:
    marked = [block for block in block_run_by(PAGE, __file__) if block.language == "bash"]
    assert len(marked) == 1 and len(marked[0].commands) == 3, (
        f"{PAGE.name}: expected one bash block of three commands marked run by "
        f"{Path(__file__).name}"
    )
    generator, secrets, render = (words(command) for command in marked[0].commands)
    assert generator[:3] == [".venv/bin/python", "-m", "lerobot_ros.zenoh_deployment"], generator
    assert secrets[:2] == [".venv/bin/python", "deploy/kubernetes/zenoh_secrets.py"], secrets
    assert render == ["kubectl", "kustomize", "deploy/kubernetes"], render
    return [generator, secrets, render]


def option(argv: list[str], name: str) -> list[str]:
    return [argv[index + 1] for index, word in enumerate(argv) if word == name]


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{shlex.join(argv)} failed:\n{result.stdout}\n{result.stderr}"
    return result


def as_written(argv: list[str]) -> list[str]:
    """The page's argv with this venv's programs for ``.venv/bin/python`` and ``kubectl``."""
    program = {".venv/bin/python": sys.executable, "kubectl": str(KUBECTL)}[argv[0]]
    return [program, *argv[1:]]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> dict:
    """The page's commands, run in a scratch copy of deploy/: the documents kustomize renders, and
    the files."""
    _require_tools()
    work = tmp_path_factory.mktemp("kubernetes")
    shutil.copytree(DEPLOY, work / "deploy", ignore=shutil.ignore_patterns("__pycache__"))
    for leftover in (
        work / "deploy/kubernetes/secrets"
    ).iterdir():  # a developer's own secrets never count
        if leftover.name != ".gitignore":
            leftover.unlink()
    generator, secrets, render = page_commands()
    run(as_written(generator), cwd=work)
    run(as_written(secrets), cwd=work)
    output = run(as_written(render), cwd=work).stdout
    documents = [document for document in yaml.safe_load_all(output) if document]
    return {
        "documents": documents,
        "work": work,
        "generated": work / option(generator, "--out")[0],
        "router_hosts": option(secrets, "--router-host"),
        "robots": option(generator, "--robots")[0].split(","),
    }


def of_kind(rendered: dict, kind: str) -> list[dict]:
    return [document for document in rendered["documents"] if document["kind"] == kind]


def named(rendered: dict, kind: str, name: str) -> dict:
    found = [
        document for document in of_kind(rendered, kind) if document["metadata"]["name"] == name
    ]
    assert len(found) == 1, (
        f"expected one {kind} {name}, found "
        f"{[d['metadata']['name'] for d in of_kind(rendered, kind)]}"
    )
    return found[0]


def generated(rendered: dict, kind: str, prefix: str) -> dict:
    """A ConfigMap or Secret of a kustomize generator (its name carries a content hash)."""
    found = [
        document
        for document in of_kind(rendered, kind)
        if document["metadata"]["name"].startswith(prefix + "-")
    ]
    assert len(found) == 1, f"expected one {kind} generated as {prefix}"
    return found[0]


def server_pod(rendered: dict) -> dict:
    return named(rendered, "StatefulSet", "policy-server")["spec"]["template"]["spec"]


def server_container(rendered: dict) -> dict:
    (container,) = server_pod(rendered)["containers"]
    return container


def mounted(
    rendered: dict, pod: dict, container: dict, kind: str, prefix: str
) -> tuple[dict, str]:
    """(the generated ConfigMap or Secret, where ``container`` mounts it)."""
    document = generated(rendered, kind, prefix)
    name = document["metadata"]["name"]
    field, key = ("configMap", "name") if kind == "ConfigMap" else ("secret", "secretName")
    volume = next(
        volume["name"] for volume in pod["volumes"] if volume.get(field, {}).get(key) == name
    )
    return document, next(
        mount["mountPath"] for mount in container["volumeMounts"] if mount["name"] == volume
    )


def kubernetes_parameters(rendered: dict) -> tuple[dict, dict]:
    config_map = generated(rendered, "ConfigMap", "policy-server-parameters")["data"]
    return (
        {
            name: yaml.safe_load(text)["/**"]["ros__parameters"]
            for name, text in config_map.items()
        },
        config_map,
    )


# --- rendering and schemas
# ---------------------------------------------------------------------------


def test_every_rendered_document_passes_the_kubernetes_schemas_strictly(rendered):
    kinds = {document["kind"] for document in rendered["documents"]}
    assert kinds == {
        "Namespace",
        "ConfigMap",
        "Secret",
        "Service",
        "StatefulSet",
        "Deployment",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }, kinds
    for version in KUBERNETES_VERSIONS:
        for document in rendered["documents"]:
            # Raises ValidationError naming the field, or SchemaNotFoundError for a kind it has no
            # schema of.
            kubernetes_validate.validate(document, version, strict=True)
    assert {
        document["metadata"].get("namespace")
        for document in rendered["documents"]
        if document["kind"] != "Namespace"
    } == {"lerobot"}


def test_strict_validation_refuses_a_misspelt_field(rendered):
    """The check above can fail: a field the schema does not know, or a wrong type, is refused."""
    for path, change in (
        ("readinessProbe", {"timeoutSecond": 3}),
        ("resources", {"limits": {"memory": ["32Gi"]}}),
    ):
        statefulset = copy.deepcopy(named(rendered, "StatefulSet", "policy-server"))
        statefulset["spec"]["template"]["spec"]["containers"][0][path].update(change)
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(statefulset, KUBERNETES_VERSIONS[-1], strict=True)


# --- the server pods
# ---------------------------------------------------------------------------------


def test_the_configmap_parameters_are_the_servers_own(rendered):
    from lerobot_ros.server.settings import PARAMETERS, ServerSettings

    files, texts = kubernetes_parameters(rendered)
    assert set(files) == {"server.yaml", "server-kubernetes.yaml"}
    # server.yaml is config/server.yaml, byte for byte (kustomize reads no file outside its folder,
    # so a copy).
    assert texts["server.yaml"] == (REPO / "config/server.yaml").read_text(), (
        "deploy/kubernetes/server.yaml differs from config/server.yaml: cp config/server.yaml "
        "deploy/kubernetes/"
    )
    assert files["server.yaml"] == {entry.name: entry.default for entry in PARAMETERS}
    overrides = files["server-kubernetes.yaml"]
    assert set(overrides) <= {entry.name for entry in PARAMETERS}, set(overrides) - {
        e.name for e in PARAMETERS
    }
    # Read in that order (the later file wins), the values make valid settings: the server would
    # start.
    settings = ServerSettings.from_values({**files["server.yaml"], **overrides})
    assert (settings.device, settings.http_host) == ("cuda", "0.0.0.0")
    # The default checkpoint is the repository's trained SmolVLA, where the image has the
    # repository.
    image_root = "/opt/lerobot_ros/"
    assert {f"WORKDIR {image_root.rstrip('/')}", "COPY . ."} <= set(dockerfile_lines())
    assert settings.checkpoint.startswith(image_root), settings.checkpoint
    in_repository = settings.checkpoint[len(image_root) :]
    assert (REPO / in_repository / "config.json").is_file(), in_repository
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert not any(
        in_repository.startswith(pattern.rstrip("/") + "/") for pattern in ignored if pattern
    ), ignored


def test_the_server_reads_the_mounted_parameter_files_in_order(rendered):
    pod, container = server_pod(rendered), server_container(rendered)
    _, mount = mounted(rendered, pod, container, "ConfigMap", "policy-server-parameters")
    args = container["args"]
    assert args[0] == "--ros-args"
    assert option(args, "--params-file") == [
        f"{mount}/server.yaml",
        f"{mount}/server-kubernetes.yaml",
    ]
    # Each replica under its own namespace, /gpu<ordinal>, from the StatefulSet's pod-index label.
    assert option(args, "-r") == ["__ns:=/gpu$(POD_INDEX)"]
    index = next(env for env in container["env"] if env["name"] == "POD_INDEX")
    assert (
        index["valueFrom"]["fieldRef"]["fieldPath"]
        == "metadata.labels['apps.kubernetes.io/pod-index']"
    )
    environment = {env["name"]: env.get("value") for env in container["env"]}
    assert environment["RMW_IMPLEMENTATION"] == "rmw_zenoh_cpp"
    _, session_mount = mounted(
        rendered, pod, container, "ConfigMap", "policy-server-zenoh-session"
    )
    assert environment["ZENOH_SESSION_CONFIG_URI"] == f"{session_mount}/session.json5"


def test_the_probes_ask_the_servers_real_endpoints_what_they_mean(rendered):
    from lerobot_ros.server.observability.http_endpoint import (
        LIVENESS_PATH,
        READINESS_PATH,
        HealthEndpoint,
        HealthSnapshot,
    )

    container = server_container(rendered)
    files, _ = kubernetes_parameters(rendered)
    http_port = files["server-kubernetes.yaml"]["http_port"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    paths = {}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        get = container[probe]["httpGet"]
        assert ports[get["port"]] == http_port, (
            f"{probe} asks port {get['port']}, the server listens on {http_port}"
        )
        paths[probe] = get["path"]
    assert paths == {
        "startupProbe": LIVENESS_PATH,
        "livenessProbe": LIVENESS_PATH,
        "readinessProbe": READINESS_PATH,
    }
    assert LIVENESS_PATH != READINESS_PATH
    # On a real endpoint: a draining server must stay alive for the liveness probe and leave
    # readiness.
    import urllib.error
    import urllib.request

    def status(endpoint: HealthEndpoint, path: str) -> int:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{endpoint.port}{path}", timeout=5
            ) as response:
                return response.status
        except urllib.error.HTTPError as error:
            return error.code

    with HealthEndpoint(
        "127.0.0.1", 0, lambda: HealthSnapshot(ready=True, draining=True)
    ) as endpoint:
        assert (
            status(endpoint, paths["livenessProbe"]),
            status(endpoint, paths["readinessProbe"]),
        ) == (200, 503)
    # The start-up probe waits out loading and warm-up (the endpoint opens only then): minutes, not
    # seconds.
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600


def test_the_termination_grace_covers_the_drain(rendered):
    from lerobot_ros.launch_plan import SERVER_STOP_TIMEOUT_S
    from lerobot_ros.server.node import DRAIN_TIMEOUT_S

    grace = server_pod(rendered)["terminationGracePeriodSeconds"]
    assert grace >= SERVER_STOP_TIMEOUT_S > DRAIN_TIMEOUT_S, (
        grace,
        SERVER_STOP_TIMEOUT_S,
        DRAIN_TIMEOUT_S,
    )
    assert "preStop" not in server_container(rendered).get("lifecycle", {}), (
        "SIGTERM starts the drain itself"
    )


def test_one_server_per_gpu(rendered):
    container = server_container(rendered)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["resources"].get("requests", {}).get("nvidia.com/gpu", 1) == 1
    statefulset = named(rendered, "StatefulSet", "policy-server")
    assert (
        statefulset["spec"]["replicas"] >= 2
        and statefulset["spec"]["updateStrategy"]["type"] == "RollingUpdate"
    )


def test_disruption_budgets_cover_the_servers_and_the_routers(rendered):
    budgets = {
        budget["metadata"]["name"]: budget["spec"]
        for budget in of_kind(rendered, "PodDisruptionBudget")
    }
    server_labels = named(rendered, "StatefulSet", "policy-server")["spec"]["template"][
        "metadata"
    ]["labels"]
    assert budgets["policy-server"]["maxUnavailable"] == 1
    assert budgets["policy-server"]["selector"]["matchLabels"].items() <= server_labels.items()
    routers = of_kind(rendered, "Deployment")
    for router in routers:
        assert (
            budgets["zenoh-router"]["selector"]["matchLabels"].items()
            <= router["spec"]["template"]["metadata"]["labels"].items()
        )
    assert 1 <= budgets["zenoh-router"]["minAvailable"] < len(routers)


# --- the routers
# ---------------------------------------------------------------------------------------


def router_peers(rendered: dict) -> dict[str, list[str]]:
    """Router Deployment name -> the endpoints it is told to connect to (``-e``)."""
    peers = {}
    for router in of_kind(rendered, "Deployment"):
        (container,) = router["spec"]["template"]["spec"]["containers"]
        peers[router["metadata"]["name"]] = option(container["args"], "-e")
    return peers


def test_two_routers_on_different_nodes_each_peered_with_the_other(rendered):
    peers = router_peers(rendered)
    assert set(peers) == {"zenoh-router-a", "zenoh-router-b"}
    services = {service["metadata"]["name"]: service for service in of_kind(rendered, "Service")}
    for name, endpoints in peers.items():
        (other,) = set(peers) - {name}
        # Never its own address: a Zenoh router connected to itself delivers every message twice.
        assert endpoints == [f"tcp/{other}:7447"], (name, endpoints)
        assert services[other]["spec"]["selector"]["app.kubernetes.io/instance"] == other
        router = named(rendered, "Deployment", name)
        assert router["spec"]["replicas"] == 1
        term = router["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"
        ][0]
        assert term["topologyKey"] == "kubernetes.io/hostname"
    # Every server session knows both routers, each through its in-cluster Service.
    session = read_json5(DEPLOY / "kubernetes/zenoh-session.json5")
    assert session["mode"] == "client"
    assert sorted(session["connect"]["endpoints"]) == sorted(f"tcp/{name}:7447" for name in peers)


def test_only_the_mtls_port_leaves_the_cluster(rendered):
    for service in of_kind(rendered, "Service"):
        ports = {port["port"] for port in service["spec"]["ports"]}
        if service["spec"].get("type") in ("LoadBalancer", "NodePort"):
            assert ports == {7448}, (
                f"{service['metadata']['name']} exposes {ports} outside the cluster"
            )
    robot_facing = [
        service
        for service in of_kind(rendered, "Service")
        if service["spec"].get("type") == "LoadBalancer"
    ]
    assert len(robot_facing) == 2
    (policy,) = of_kind(rendered, "NetworkPolicy")
    plain = [
        rule
        for rule in policy["spec"]["ingress"]
        if {port["port"] for port in rule["ports"]} == {7447}
    ]
    assert len(plain) == 1 and {
        source["podSelector"]["matchLabels"]["app.kubernetes.io/name"]
        for source in plain[0]["from"]
    } == {"policy-server", "zenoh-router"}


def test_the_secrets_are_the_generated_files_and_the_acl_is_unchanged(rendered):
    zenoh = pytest.importorskip("zenoh")
    secrets = rendered["work"] / "deploy/kubernetes/secrets"
    tls = generated(rendered, "Secret", "zenoh-router-tls")["data"]
    for name, value in tls.items():
        assert base64.b64decode(value) == (secrets / name).read_bytes(), name
    server_tls = rendered["generated"] / "server/tls"
    assert {name: base64.b64decode(value) for name, value in tls.items()} == {
        path.name: path.read_bytes() for path in server_tls.iterdir()
    }
    assert (secrets / "server-router.key").stat().st_mode & 0o077 == 0, (
        "the private key is readable by others"
    )
    text = base64.b64decode(
        generated(rendered, "Secret", "zenoh-router-config")["data"]["router.json5"]
    ).decode()
    config = zenoh.Config.from_json5(text)  # zenoh's own parser reads it
    cluster = read_json5(secrets / "router.json5")
    original = read_json5(rendered["generated"] / "server/router.json5")
    acl, generated_acl = cluster["access_control"], original["access_control"]
    assert acl["policies"] == generated_acl["policies"]
    # The generated rules, each key of the server at /lerobot on every replica's namespace instead.
    widened = [
        {
            **rule,
            "key_exprs": [
                key.replace("*/lerobot/", "*/*/lerobot/", 1) for key in rule["key_exprs"]
            ],
        }
        for rule in generated_acl["rules"]
    ]
    assert acl["rules"] == widened
    assert any(
        key.startswith("*/*/lerobot/clients/arm_1/")
        for rule in acl["rules"]
        for key in rule["key_exprs"]
    )
    changed = [
        (a, b) for a, b in zip(acl["subjects"], generated_acl["subjects"], strict=False) if a != b
    ]
    assert changed == [
        (
            {"id": "local", "link_protocols": ["tcp"]},
            {"id": "local", "interfaces": ["lo"], "link_protocols": ["tcp"]},
        )
    ], changed
    assert json.loads(config.get_json("listen/endpoints")) == [
        "tcp/0.0.0.0:7447",
        "tls/0.0.0.0:7448",
    ]
    # The certificate paths are where the router pods mount the TLS Secret.
    router = named(rendered, "Deployment", "zenoh-router-a")["spec"]["template"]["spec"]
    (container,) = router["containers"]
    _, tls_mount = mounted(rendered, router, container, "Secret", "zenoh-router-tls")
    _, config_mount = mounted(rendered, router, container, "Secret", "zenoh-router-config")
    assert option(container["args"], "-c") == [f"{config_mount}/router.json5"]
    paths = {
        value
        for key, value in cluster["transport"]["link"]["tls"].items()
        if isinstance(value, str)
    }
    assert paths == {f"{tls_mount}/{name}" for name in tls}
    for robot in rendered["robots"]:  # each robot dials both routers
        robot_config = read_json5(rendered["generated"] / f"robots/{robot}/router.json5")
        assert robot_config["connect"]["endpoints"] == [
            f"tls/{host}:7448" for host in rendered["router_hosts"]
        ]


def test_the_server_sessions_qos_names_a_namespaced_replicas_keys():
    zenoh = pytest.importorskip("zenoh")
    from lerobot_ros.protocol import names

    session = zenoh.Config.from_file(str(DEPLOY / "kubernetes/zenoh-session.json5"))
    rules = json.loads(session.get_json("qos/publication"))
    type_hash = "RIHS01_" + "ab" * 32

    def matching(topic: str, type_name: str) -> list[dict]:
        # rmw_zenoh's key of the topic of replica /gpu3 in domain 0.
        key = zenoh.KeyExpr(
            f"0/gpu3/lerobot/{topic}/lerobot_ros::msg::dds_::{type_name}_/{type_hash}"
        )
        return [
            # zenoh adds None
            {field: value for field, value in rule["config"].items() if value is not None}
            for rule in rules
            if any(zenoh.KeyExpr(expr).intersects(key) for expr in rule["key_exprs"])
        ]

    assert matching(names.action_chunk_topic("arm_1"), "ActionChunk") == [
        {"priority": "real_time", "congestion_control": "block", "express": True}
    ]
    assert [config["priority"] for config in matching(names.STATUS, "ServerStatus")] == [
        "interactive_high"
    ]


# --- the image
# -------------------------------------------------------------------------------------------


def dockerfile_lines() -> list[str]:
    return [line.strip() for line in (DEPLOY / "Dockerfile").read_text().splitlines()]


def test_the_image_runs_the_setup_script_ci_runs_and_starts_the_server(rendered):
    """Not built here (no container runtime): what can be read is held to the repository."""
    ci = (REPO / ".ci/run").read_text()
    assert (
        "./scripts/run_tests.sh" in ci
        and "scripts/setup_env.sh" in (REPO / "scripts/run_tests.sh").read_text()
    )
    lines = dockerfile_lines()
    assert any(line.startswith("RUN ") and "./scripts/setup_env.sh" in line for line in lines)
    assert "COPY . ." in lines and "WORKDIR /opt/lerobot_ros" in lines
    entrypoint = json.loads(
        next(line for line in lines if line.startswith("ENTRYPOINT "))[len("ENTRYPOINT ") :]
    )
    assert entrypoint[-1] == "/opt/lerobot_ros/.venv/bin/policy_server_node"
    setup = (REPO / "setup.py").read_text()
    assert '"policy_server_node = lerobot_ros.server.node:main"' in setup
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert {".venv", "build", "deploy/kubernetes/secrets"} <= set(ignored)
    user = next(line for line in lines if line.startswith("RUN useradd"))
    assert f"--uid {server_pod(rendered)['securityContext']['runAsUser']}" in user
    (image,) = {container["image"] for container in server_pod(rendered)["containers"]}
    kustomization = yaml.safe_load((DEPLOY / "kubernetes/kustomization.yaml").read_text())
    (entry,) = [entry for entry in kustomization["images"] if entry["name"] == "lerobot-ros"]
    assert image == f"{entry['newName']}:{entry['newTag']}"


def test_the_secrets_command_refuses_a_router_the_certificate_does_not_name(rendered, tmp_path):
    script = rendered["work"] / "deploy/kubernetes/zenoh_secrets.py"
    result = subprocess.run(
        [
            sys.executable,
            str(script),
            str(rendered["generated"]),
            "--router-host",
            "elsewhere.lan",
            "--secrets-dir",
            str(tmp_path / "secrets"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "does not name ['elsewhere.lan']" in result.stderr, (
        result.stderr
    )
    assert not (tmp_path / "secrets").exists()


# --- the routers' config in the real Zenoh engine
# -----------------------------------------------------------


def pod_network_address() -> str:
    """An address of this machine that is not loopback: a link from it arrives the way a pod's
    does."""
    import socket

    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        # TEST-NET-1: nothing is sent, the kernel only picks the source address
        probe.connect(("192.0.2.1", 9))
        address = probe.getsockname()[0]
    except OSError:
        address = ""
    finally:
        probe.close()
    if not address or address.startswith("127."):
        pytest.skip(
            "this machine has no address besides loopback: a pod's plain TCP link cannot be stood "
            "for"
        )
    return address


@pytest.fixture(scope="module")
def loopback_secrets(rendered, tmp_path_factory) -> Path:
    """The page's commands again with the routers reachable as 127.0.0.1 (the certificate must name
    it)."""
    work = tmp_path_factory.mktemp("kubernetes_engine")
    generator, _, _ = page_commands()
    run(
        as_written(without(generator, "--server-host", "--out"))
        + ["--server-host", "127.0.0.1", "--out", "out"],
        cwd=work,
    )
    run(
        [
            sys.executable,
            str(rendered["work"] / "deploy/kubernetes/zenoh_secrets.py"),
            "out",
            "--router-host",
            "127.0.0.1",
            "--secrets-dir",
            "secrets",
        ],
        cwd=work,
    )
    return work


def test_two_routers_carry_a_server_in_client_mode_to_a_robot_over_mtls_and_its_acl_holds(
    loopback_secrets,
):
    """Router a and router b run the generated cluster config, changed only where a pod differs
    from this test
    (ports, the mount path of the TLS files, the peer's address); the server's session is
    zenoh-session.json5
    (client mode), dialling router b from a non-loopback address as a pod would; a robot's router
    dials router a
    over mTLS. So every message crosses robot router -> a -> b -> server, and the ACL is the
    cluster one."""
    zenoh = pytest.importorskip("zenoh")
    from support.ros import free_port
    from support.zenoh_engine import (
        Inbox,
        Sessions,
        chunk_key,
        deliver,
        get,
        local_config,
        observation_key,
        put,
    )

    address, work = pod_network_address(), loopback_secrets
    ports = {name: free_port() for name in ("a", "a_tls", "b", "b_tls", "robot")}

    def router(name: str, peer: str) -> "zenoh.Config":
        config = zenoh.Config.from_file(str(work / "secrets/router.json5"))
        assert get(config, "listen/endpoints") == ["tcp/0.0.0.0:7447", "tls/0.0.0.0:7448"]
        put(
            config,
            "listen/endpoints",
            [f"tcp/0.0.0.0:{ports[name]}", f"tls/127.0.0.1:{ports[name + '_tls']}"],
        )
        put(config, "connect/endpoints", [f"tcp/{address}:{ports[peer]}"])  # the Deployment's -e
        for field, path in get(config, "transport/link/tls").items():
            if isinstance(path, str) and path.startswith("/etc/zenoh/tls/"):
                put(config, f"transport/link/tls/{field}", str(work / "secrets" / Path(path).name))
        return config

    sessions = Sessions()
    try:
        sessions(router("a", "b"))
        sessions(router("b", "a"))
        server_config = zenoh.Config.from_file(str(DEPLOY / "kubernetes/zenoh-session.json5"))
        put(server_config, "connect/endpoints", [f"tcp/{address}:{ports['b']}"])
        server = sessions(server_config)
        robot_router = zenoh.Config.from_file(str(work / "out/robots/arm_1/router.json5"))
        assert get(robot_router, "connect/endpoints") == ["tls/127.0.0.1:7448"]
        put(robot_router, "connect/endpoints", [f"tls/127.0.0.1:{ports['a_tls']}"])
        put(robot_router, "listen/endpoints", [f"tcp/127.0.0.1:{ports['robot']}"])
        sessions(robot_router)
        robot = sessions(local_config(ports["robot"]))

        replica = "gpu0/lerobot"  # what pod 0 serves under
        at_server, at_robot = Inbox(), Inbox()
        server.declare_subscriber(observation_key("arm_1", replica), at_server)
        server.declare_subscriber(observation_key("arm_2", replica), at_server)
        robot.declare_subscriber(chunk_key("arm_1", replica), at_robot)
        assert deliver(
            robot,
            observation_key("arm_1", replica),
            at_server,
            [(robot, observation_key("arm_2", replica))],
        ), "arm_1's observation did not reach the server"
        assert not at_server.got(observation_key("arm_2", replica)), (
            "arm_1 published on arm_2's observation topic"
        )
        assert deliver(server, chunk_key("arm_1", replica), at_robot), (
            "the server's chunk did not reach arm_1"
        )
    finally:
        sessions.close()
