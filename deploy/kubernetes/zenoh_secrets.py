"""The Zenoh routers' Secrets for deploy/kubernetes, made from what
``lerobot_ros.zenoh_deployment`` generated.

usage (from the repository root, after the generator; docs/how-to/deployment.md, section
Kubernetes):

    .venv/bin/python deploy/kubernetes/zenoh_secrets.py zenoh_deployment \
        --router-host zenoh-a.example.lan --router-host zenoh-b.example.lan

It reads DIR/server/router.json5 and DIR/server/tls/ (the generator's GPU-router files)
and writes into deploy/kubernetes/secrets/ (git-ignored, kept out of the image; the
kustomization's secretGenerator reads it):

    router.json5
        the config of both routers: the generated one with five changes and no other
    ca.pem, server-router.pem, server-router.key
        the TLS files (the key readable by its owner only)

and rewrites each DIR/robots/<id>/router.json5 to dial every ``--router-host``, so a robot
keeps its route to the servers when one router goes.

The five changes, each forced by running in a cluster instead of on one GPU machine:

- listen: plain TCP on the pod network (port 7447: the policy servers and the other router; the
  NetworkPolicy of zenoh-routers.yaml admits no one else) and the generated TLS port for robots, on
  every interface;
- connect: none; each router's Deployment names the other router on the command line (a router
  given its own address connects to itself, and Zenoh then delivers every message twice);
- the trusted subject (plain TCP over loopback) becomes plain TCP on any interface: in a cluster
  the servers reach the routers from other pods. Robots still come over TLS with their certificate,
  held to their own policy, which is the generated one unchanged;
- the replicas' keys: every server in the cluster serves under a namespace of its own
  (/gpu0/lerobot, /gpu1/lerobot, ...), so each ACL key of the one server at /lerobot,
  ``*/lerobot/...`` (domain, then the topic), becomes ``*/*/lerobot/...``, as
  config/zenoh/router_fleet_server.json5 writes them: a robot's rights hold on every replica;
- the certificate paths: /etc/zenoh/tls/, where the pods mount the Secret.

Invariant: the access-control rules, subjects and policies are the generator's, unchanged but for
the replicas' keys and the trusted subject's interface restriction. A generated file that is not
what this expects (another TLS port than the Services expose, no trusted loopback subject, no key
of /lerobot) is refused, not converted.
"""

from __future__ import annotations

import argparse
import copy
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lerobot_ros.json5_reader import read_json5
from lerobot_ros.zenoh_deployment import DEFAULT_PORT, SERVER_CERT, dial_address, write_config

HERE = Path(__file__).resolve().parent
SECRETS_DIR = HERE / "secrets"
#: Where the router pods mount the TLS Secret (zenoh-routers.yaml).
TLS_MOUNT = "/etc/zenoh/tls"
#: The port the servers and the other router use inside the cluster (never exposed outside it).
CLUSTER_PORT = 7447
TLS_FILES = ("ca.pem", f"{SERVER_CERT}.pem", f"{SERVER_CERT}.key")


def _trusted_subject(acl: dict) -> dict:
    """The generated subject for local processes: plain TCP over loopback, no certificate."""
    local = [
        subject
        for subject in acl["subjects"]
        if subject.get("interfaces") == ["lo"] and subject.get("link_protocols") == ["tcp"]
    ]
    if len(local) != 1:
        raise ValueError(
            f"expected one trusted subject for plain TCP over loopback in the generated ACL, "
            f"found {len(local)}: {acl['subjects']}"
        )
    return local[0]


#: A key of the single server (domain, then /lerobot/...) and the same key on every replica's
#: namespace.
SERVER_KEY, REPLICA_KEY = "*/lerobot/", "*/*/lerobot/"


def replica_keys(acl: dict) -> dict:
    """``acl`` with every key of the server at /lerobot widened to the replicas'
    /<namespace>/lerobot."""
    widened = copy.deepcopy(acl)
    for rule in widened["rules"]:
        rule["key_exprs"] = [
            REPLICA_KEY + key[len(SERVER_KEY) :] if key.startswith(SERVER_KEY) else key
            for key in rule["key_exprs"]
        ]
    if widened == acl:
        raise ValueError(
            f"expected access-control keys of the server at /lerobot ({SERVER_KEY}...) in the "
            f"generated config, found none"
        )
    return widened


def cluster_router_config(generated: dict) -> dict:
    """The routers' config for the cluster: ``generated`` (server/router.json5) with the five
    changes above."""
    config = copy.deepcopy(generated)
    tls_endpoints = [
        endpoint for endpoint in generated["listen"]["endpoints"] if endpoint.startswith("tls/")
    ]
    if len(tls_endpoints) != 1:
        raise ValueError(
            f"expected one TLS listen endpoint in the generated config, got {tls_endpoints}"
        )
    tls_port = int(tls_endpoints[0].rpartition(":")[2])
    if tls_port != DEFAULT_PORT:
        raise ValueError(
            f"the generated config listens for robots on TLS port {tls_port}; the Services of "
            f"zenoh-routers.yaml expose {DEFAULT_PORT}: generate without --server-port, or change "
            "both"
        )
    config["listen"]["endpoints"] = [f"tcp/0.0.0.0:{CLUSTER_PORT}", f"tls/0.0.0.0:{DEFAULT_PORT}"]
    config["connect"] = {"endpoints": []}
    config["access_control"] = replica_keys(config["access_control"])
    trusted = _trusted_subject(config["access_control"])
    del trusted["interfaces"]
    tls = config["transport"]["link"]["tls"]
    for field, path in tls.items():
        if isinstance(path, str) and path.endswith((".pem", ".key")):
            tls[field] = f"{TLS_MOUNT}/{Path(path).name}"
    return config


def robot_router_config(generated: dict, router_hosts: list[str]) -> dict:
    """A robot's generated router config, dialling every router host on the TLS port."""
    config = copy.deepcopy(generated)
    config["connect"]["endpoints"] = [
        f"tls/{dial_address(host)}:{DEFAULT_PORT}" for host in router_hosts
    ]
    return config


def certificate_names(certificate: Path) -> str:
    """The subject alternative names of ``certificate``, as openssl prints them."""
    result = subprocess.run(
        ["openssl", "x509", "-in", str(certificate), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl could not read {certificate}: {result.stderr.strip()}")
    return result.stdout


def _named(host: str, alt_names: str) -> bool:
    return any(
        entry.strip() in (f"DNS:{host}", f"IP Address:{host}")
        for line in alt_names.splitlines()
        for entry in line.split(",")
    )


def convert(
    generated_dir: Path, router_hosts: list[str], secrets_dir: Path = SECRETS_DIR
) -> list[Path]:
    """Write the Secrets' files into ``secrets_dir`` and the robots' configs in place; returns what
    was written."""
    server = generated_dir / "server"
    if not (server / "router.json5").is_file():
        raise ValueError(
            f"{server / 'router.json5'} does not exist: run lerobot_ros.zenoh_deployment with "
            f"--out {generated_dir} first"
        )
    missing = [name for name in TLS_FILES if not (server / "tls" / name).is_file()]
    if missing:
        raise ValueError(f"{server / 'tls'} lacks {missing}")
    alt_names = certificate_names(server / "tls" / f"{SERVER_CERT}.pem")
    unnamed = [host for host in router_hosts if not _named(host, alt_names)]
    if unnamed:
        raise ValueError(
            f"the server certificate does not name {unnamed} (robots check the name they dial): "
            f"generate again with --server-host for each router host; it names "
            f"{' '.join(alt_names.strip().splitlines()[1:]).strip() or 'nothing'}"
        )
    secrets_dir.mkdir(parents=True, exist_ok=True)
    written = [secrets_dir / "router.json5"]
    write_config(
        written[0],
        cluster_router_config(read_json5(server / "router.json5")),
        "Zenoh routers of deploy/kubernetes (both); made by deploy/kubernetes/zenoh_secrets.py "
        "from\n"
        f"{server / 'router.json5'}: plain TCP inside the cluster, mTLS and per-robot ACLs for "
        "robots.",
    )
    for name in TLS_FILES:
        target = secrets_dir / name
        target.unlink(missing_ok=True)
        shutil.copyfile(server / "tls" / name, target)
        os.chmod(target, 0o600 if name.endswith(".key") else 0o644)
        written.append(target)
    for robot_config in sorted((generated_dir / "robots").glob("*/router.json5")):
        generated = read_json5(robot_config)
        hosts = ", ".join(router_hosts)
        write_config(
            robot_config,
            robot_router_config(generated, router_hosts),
            f"Zenoh router of robot {robot_config.parent.name}; generated by "
            "lerobot_ros.zenoh_deployment, "
            f"then given both\nrouters of deploy/kubernetes to dial ({hosts}) by "
            "deploy/kubernetes/zenoh_secrets.py.",
        )
        written.append(robot_config)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="deploy/kubernetes/zenoh_secrets.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "generated", type=Path, help="the --out directory of lerobot_ros.zenoh_deployment"
    )
    parser.add_argument(
        "--router-host",
        action="append",
        required=True,
        metavar="HOST",
        help="how robots reach one router (the address of its robot-facing Service); give both, "
        "in the order robots should try them; each must be a --server-host of the generator",
    )
    parser.add_argument(
        "--secrets-dir",
        type=Path,
        default=SECRETS_DIR,
        help=f"where the Secrets' files go (default: {SECRETS_DIR.relative_to(HERE.parents[1])})",
    )
    args = parser.parse_args(argv)
    try:
        if len(set(args.router_host)) != len(args.router_host):
            raise ValueError(f"--router-host: a host is given twice: {args.router_host}")
        written = convert(args.generated, args.router_host, args.secrets_dir)
    except (ValueError, RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path}")
    print(
        f"next: kubectl apply -k {HERE.relative_to(HERE.parents[1])}; copy each robots/<id>/ to "
        "its robot "
        f"(docs/how-to/two_machines.md, step 3)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
