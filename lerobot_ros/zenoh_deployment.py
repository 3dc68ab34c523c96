"""Certificates and router configs for a robot fleet and one GPU server over rmw_zenoh,
mutual TLS and per-robot ACLs.

For a list of robots (client ids) and the GPU server's host name(s) / IP(s)
it writes, under ``--out``::

    ca/ca.pem, ca/ca.key
        the private CA (keep it here: it signs robots added later; never copy it)
    server/router.json5
        the GPU machine's router: loopback TCP for local nodes, an mTLS listener for robots,
        one access-control entry per robot
    server/tls/ca.pem, server-router.pem, server-router.key
    robots/<id>/router.json5
        robot <id>'s router: connects out over mTLS with its certificate
    robots/<id>/tls/ca.pem, <id>.pem, <id>.key
        (certificate common name = the client id)

Copy ``server/`` to the GPU machine and ``robots/<id>/`` to robot <id> (at
the paths given by ``--server-dir`` / ``--robot-dir``; by default the configs
name the files where they are written). Walkthrough: docs/how-to/two_machines.md.

Invariant: the router configs are the shipped templates
(``config/zenoh/router_server.json5``, ``router_robot.json5``) parsed,
modified as data and written back, never rewritten as text: the access-
control list keeps one definition, the template's example robot's entries
repeated once per robot with its id in place of the example's. A template
placeholder ({tls_dir}, {server_host}, {robot_id}) left unfilled is an
error, not a file written. Certificates are made with the ``openssl``
command line tool (EC P-256 keys).

usage: python -m lerobot_ros.zenoh_deployment --robots arm_1,arm_2 \\
           --server-host gpu.example.lan --out DIR
"""

from __future__ import annotations

import argparse
import copy
import ipaddress
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from lerobot_ros.json5_reader import read_json5
from lerobot_ros.protocol.contract import CLIENT_ID_MAX_LENGTH, CLIENT_ID_PATTERN

SERVER_TEMPLATE = "router_server.json5"
ROBOT_TEMPLATE = "router_robot.json5"
# the GPU router's certificate and key file names (no robot may take this id)
SERVER_CERT = "server-router"
DEFAULT_PORT = 7448  # the TLS port robots dial (the templates' too)
PLACEHOLDER = re.compile(r"\{[a-z_0-9]+\}")


def write_config(path: Path, config: dict, header: str) -> None:
    """JSON (which JSON5 readers, zenoh's included, accept) after a // comment header."""
    comment = "".join(f"// {line}".rstrip() + "\n" for line in header.splitlines())
    path.write_text(comment + json.dumps(config, indent=2) + "\n")


def template_dir() -> Path:
    """The shipped templates: the package's share directory (colcon install) or the source tree."""
    from lerobot_ros.launch_plan import share_path

    return Path(share_path("config", "zenoh"))


# --- filling the templates
# ------------------------------------------------------------------------


def fill(value, placeholders: dict[str, str], source: str):
    """``value`` with every ``{name}`` of ``placeholders`` replaced in its strings; an unknown one
    is an error."""
    if isinstance(value, dict):
        return {key: fill(item, placeholders, source) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, placeholders, source) for item in value]
    if isinstance(value, str):
        for name, replacement in placeholders.items():
            value = value.replace("{" + name + "}", replacement)
        left = PLACEHOLDER.search(value)
        if left:
            raise ValueError(f"{source}: placeholder {left.group()} has no value (in {value!r})")
    return value


def with_port(endpoint: str, port: int) -> str:
    """``proto/host:port`` with another port (IPv6 hosts are bracketed, so the port follows the
    last colon)."""
    address, separator, _ = endpoint.rpartition(":")
    if not separator or "/" not in address:
        raise ValueError(f"expected an endpoint like tls/host:7448, got {endpoint!r}")
    return f"{address}:{port}"


def dial_address(host: str) -> str:
    """How a Zenoh endpoint writes ``host``: an IPv6 address in brackets."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def _replace_segment(key_expr: str, old: str, new: str) -> str:
    return "/".join(new if segment == old else segment for segment in key_expr.split("/"))


def per_robot_acl(acl: dict, robots: list[str]) -> dict:
    """The template's access control with its example robot's entries repeated for each of
    ``robots``.

    The example robot is the subject identified by a certificate common name
    that its policy's rules name as a key-expression segment (``clients/arm_1/...``);
    exactly one must exist. Its subject, its policy and those of its rules that
    name it are replaced, in place, by one copy per robot with the robot's id
    in place of the example's; the shared rules (graph, services, heartbeat)
    and every other subject and policy (the trusted loopback one) stay as they are.
    """
    rules = {rule["id"]: rule for rule in acl["rules"]}
    examples = []
    for subject in acl["subjects"]:
        for name in subject.get("cert_common_names") or []:
            for policy in acl["policies"]:
                if subject["id"] in policy["subjects"]:
                    own = [
                        rule_id
                        for rule_id in policy["rules"]
                        if any(name in key.split("/") for key in rules[rule_id]["key_exprs"])
                    ]
                    if own:
                        examples.append((subject, name, policy, own))
    if len(examples) != 1:
        raise ValueError(
            f"the template's access control must name exactly one example robot, found "
            f"{[name for _, name, _, _ in examples]}"
        )
    subject, example, policy, own_rules = examples[0]

    def renamed(identifier: str, robot: str) -> str:
        return (
            identifier.replace(example, robot)
            if example in identifier
            else f"{identifier}_{robot}"
        )

    def repeat(entries: list, is_example, make) -> list:
        out = []
        for entry in entries:
            out += [make(entry, robot) for robot in robots] if is_example(entry) else [entry]
        return out

    result = copy.deepcopy(acl)
    result["rules"] = repeat(
        acl["rules"],
        lambda rule: rule["id"] in own_rules,
        lambda rule, robot: {
            **rule,
            "id": renamed(rule["id"], robot),
            "key_exprs": [_replace_segment(key, example, robot) for key in rule["key_exprs"]],
        },
    )
    result["subjects"] = repeat(
        acl["subjects"],
        lambda entry: entry is subject,
        lambda entry, robot: {
            **entry,
            "id": renamed(entry["id"], robot),
            "cert_common_names": [robot],
        },
    )
    result["policies"] = repeat(
        acl["policies"],
        lambda entry: entry is policy,
        lambda entry, robot: {
            **entry,
            "id": renamed(entry["id"], robot),
            "rules": [
                renamed(rule_id, robot) if rule_id in own_rules else rule_id
                for rule_id in entry["rules"]
            ],
            "subjects": [
                renamed(subject["id"], robot) if each == subject["id"] else each
                for each in entry["subjects"]
            ],
        },
    )
    return result


def server_config(template: dict, robots: list[str], tls_dir: str, port: int) -> dict:
    """The GPU router: the template with its certificate paths, TLS port and one ACL entry per
    robot."""
    config = fill(template, {"tls_dir": tls_dir}, SERVER_TEMPLATE)
    config["listen"]["endpoints"] = [
        with_port(endpoint, port) if endpoint.startswith("tls/") else endpoint
        for endpoint in config["listen"]["endpoints"]
    ]
    config["access_control"] = per_robot_acl(config["access_control"], robots)
    return config


def robot_config(template: dict, robot: str, server_host: str, port: int, tls_dir: str) -> dict:
    """Robot ``robot``'s router: the template dialling ``server_host``:``port`` with that robot's
    certificate."""
    config = fill(
        template,
        {"tls_dir": tls_dir, "robot_id": robot, "server_host": dial_address(server_host)},
        ROBOT_TEMPLATE,
    )
    config["connect"]["endpoints"] = [
        with_port(endpoint, port) if endpoint.startswith("tls/") else endpoint
        for endpoint in config["connect"]["endpoints"]
    ]
    return config


# --- certificates, with the openssl command line tool
# ---------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {args[0]} failed: {result.stderr.strip()}")


def subject_alt_names(hosts: list[str]) -> str:
    return ",".join(f"IP:{host}" if _is_ip(host) else f"DNS:{host}" for host in hosts)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return False


def _write_private(path: Path, data: bytes) -> None:
    """A private key file, never readable by others (not even between its creation and a chmod)."""
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as written:
        written.write(data)


def make_ca(ca_dir: Path, days: int) -> None:
    """``ca_dir/ca.pem`` and ``ca.key``: a private CA that signs the routers' certificates."""
    ca_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:  # private (0700) while openssl writes the key
        work = Path(scratch)
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            str(days),
            "-subj",
            "/CN=lerobot_ros deployment CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
            cwd=work,
        )
        shutil.copyfile(work / "ca.pem", ca_dir / "ca.pem")
        _write_private(ca_dir / "ca.key", (work / "ca.key").read_bytes())


def issue(
    ca_dir: Path, into: Path, name: str, common_name: str, alt_names: str, days: int
) -> None:
    """``into/<name>.pem`` and ``.key``: a leaf certificate for ``common_name``, signed by the CA
    in ``ca_dir``."""
    into.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "leaf.ext").write_text(
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth,clientAuth\n"
            f"subjectAltName={alt_names}\n"
        )
        _openssl(
            "req",
            "-new",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            "leaf.key",
            "-out",
            "leaf.csr",
            "-subj",
            f"/CN={common_name}",
            cwd=work,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            "leaf.csr",
            "-CA",
            str(ca_dir / "ca.pem"),
            "-CAkey",
            str(ca_dir / "ca.key"),
            "-set_serial",
            str(secrets.randbits(120)),
            "-days",
            str(days),
            "-extfile",
            "leaf.ext",
            "-out",
            "leaf.pem",
            cwd=work,
        )
        shutil.copyfile(work / "leaf.pem", into / f"{name}.pem")
        _write_private(into / f"{name}.key", (work / "leaf.key").read_bytes())


# --- the command
# ----------------------------------------------------------------------------------


def parse_robots(text: str) -> list[str]:
    robots = [robot.strip() for robot in text.split(",") if robot.strip()]
    if not robots:
        raise ValueError("--robots: expected client ids separated by commas, e.g. arm_1,arm_2")
    for robot in robots:
        if not CLIENT_ID_PATTERN.match(robot) or len(robot) > CLIENT_ID_MAX_LENGTH:
            raise ValueError(
                f"--robots: {robot!r} is not a client id (a letter, then letters, digits or "
                f"underscores, at most {CLIENT_ID_MAX_LENGTH} characters)"
            )
    duplicates = sorted({robot for robot in robots if robots.count(robot) > 1})
    if duplicates:
        raise ValueError(f"--robots: listed twice: {duplicates}")
    return robots


def generate(
    robots: list[str],
    server_hosts: list[str],
    out: Path,
    *,
    port: int = DEFAULT_PORT,
    server_dir: str = "",
    robot_dir: str = "",
    days: int = 365,
    templates: Path | None = None,
) -> dict:
    """Write everything under ``out``; returns {"ca": path, "server": path, "robots": {id:
    path}}."""
    templates = Path(templates) if templates else template_dir()
    server_template = read_json5(templates / SERVER_TEMPLATE)
    robot_template = read_json5(templates / ROBOT_TEMPLATE)
    out = Path(out).resolve()
    ca_dir, server_out, robots_out = out / "ca", out / "server", out / "robots"
    if (ca_dir / "ca.pem").exists() and (ca_dir / "ca.key").exists():
        print(f"reusing the CA in {ca_dir} (certificates it signed before stay valid)")
    else:
        make_ca(ca_dir, days)

    server_home = server_dir or str(server_out)
    issue(
        ca_dir, server_out / "tls", SERVER_CERT, SERVER_CERT, subject_alt_names(server_hosts), days
    )
    shutil.copyfile(ca_dir / "ca.pem", server_out / "tls" / "ca.pem")
    write_config(
        server_out / "router.json5",
        server_config(server_template, robots, f"{server_home}/tls", port),
        f"GPU machine's Zenoh router for robots {', '.join(robots)}; generated by "
        "lerobot_ros.zenoh_deployment\n"
        f"from {SERVER_TEMPLATE}. Expects its certificates in {server_home}/tls.\n"
        f"  ZENOH_ROUTER_CONFIG_URI={server_home}/router.json5 ros2 run rmw_zenoh_cpp rmw_zenohd",
    )
    written = {"ca": ca_dir, "server": server_out, "robots": {}}
    for robot in robots:
        robot_out = robots_out / robot
        home = robot_dir or str(robot_out)
        issue(ca_dir, robot_out / "tls", robot, robot, f"DNS:{robot}", days)
        shutil.copyfile(ca_dir / "ca.pem", robot_out / "tls" / "ca.pem")
        write_config(
            robot_out / "router.json5",
            robot_config(robot_template, robot, server_hosts[0], port, f"{home}/tls"),
            f"Zenoh router of robot {robot}; generated by lerobot_ros.zenoh_deployment from "
            f"{ROBOT_TEMPLATE}.\n"
            f"Dials tls/{dial_address(server_hosts[0])}:{port}; expects its certificates in "
            f"{home}/tls.\n"
            f"  ZENOH_ROUTER_CONFIG_URI={home}/router.json5 ros2 run rmw_zenoh_cpp rmw_zenohd",
        )
        written["robots"][robot] = robot_out
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lerobot_ros.zenoh_deployment",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--robots",
        required=True,
        help="the robots' client ids, comma-separated (e.g. arm_1,arm_2): each gets a certificate "
        "with that common name and its own entry in the server's access-control list",
    )
    parser.add_argument(
        "--server-host",
        action="append",
        required=True,
        metavar="HOST",
        help="a host name or IP address of the GPU machine, as robots reach it; repeat for "
        "several "
        "(all go in the server certificate's subject alternative names; robots dial the first)",
    )
    parser.add_argument(
        "--out",
        required=True,
        type=Path,
        help="output directory (created; an existing CA in "
        "OUT/ca is reused, so robots added later keep working with the certificates "
        "issued before)",
    )
    parser.add_argument(
        "--server-port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TLS port of the server's router, which robots dial (default {DEFAULT_PORT})",
    )
    parser.add_argument(
        "--server-dir",
        default="",
        help="where OUT/server will be on the GPU machine (absolute path), e.g. "
        "/home/me/lerobot_zenoh; default: OUT/server as written",
    )
    parser.add_argument(
        "--robot-dir",
        default="",
        help="where OUT/robots/<id> will be on each robot (absolute path, the same on every "
        "robot); "
        "default: OUT/robots/<id> as written",
    )
    parser.add_argument(
        "--days", type=int, default=365, help="validity of the certificates in days (default 365)"
    )
    parser.add_argument(
        "--templates",
        type=Path,
        default=None,
        help="directory of router_server.json5 and router_robot.json5 (default: the shipped ones)",
    )
    args = parser.parse_args(argv)
    try:
        robots = parse_robots(args.robots)
        if SERVER_CERT in robots:
            raise ValueError(f"--robots: {SERVER_CERT!r} is the server router's certificate name")
        for option, value in (("--server-dir", args.server_dir), ("--robot-dir", args.robot_dir)):
            if value and not value.startswith("/"):
                raise ValueError(f"{option}: expected an absolute path, got {value!r}")
        if not 0 < args.server_port < 65536:
            raise ValueError(f"--server-port: expected a TCP port, got {args.server_port}")
        if shutil.which("openssl") is None:
            raise RuntimeError(
                "the openssl command line tool is not installed (apt install openssl)"
            )
        written = generate(
            robots,
            args.server_host,
            args.out,
            port=args.server_port,
            server_dir=args.server_dir.rstrip("/"),
            robot_dir=args.robot_dir.rstrip("/"),
            days=args.days,
            templates=args.templates,
        )
    except (ValueError, RuntimeError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    server_home = args.server_dir.rstrip("/") or str(written["server"])
    print(f"wrote {args.out.resolve()}:")
    print(
        f"  {written['ca']}/  the CA: keep it on this machine, never copy ca.key to a robot or "
        "server"
    )
    print(f"  {written['server']}/  -> GPU machine, at {server_home}")
    for robot, path in written["robots"].items():
        print(f"  {path}/  -> robot {robot}, at {args.robot_dir.rstrip('/') or path}")
    print(
        f"robots dial tls/{dial_address(args.server_host[0])}:{args.server_port}; on each machine "
        "start the router with"
    )
    print("  ZENOH_ROUTER_CONFIG_URI=<its router.json5> ros2 run rmw_zenoh_cpp rmw_zenohd")
    return 0


if __name__ == "__main__":
    sys.exit(main())
