"""Start lerobot_ros nodes as child processes and stop them cleanly.

Used by the demo command and the integration tests, so both run the nodes
exactly as a user does: separate OS processes talking over a real RMW.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any


def ros_args(
    parameters: Mapping[str, Any],
    node_name: str | None = None,
    namespace: str = "",
    parameter_files: Sequence[str] = (),
    remappings: Sequence[tuple[str, str]] = (),
) -> list[str]:
    """``--ros-args`` for a node: name, namespace, parameter files, then parameters
    (which win over the files; values written as YAML), then remappings."""
    args = ["--ros-args"]
    if node_name:
        args += ["-r", f"__node:={node_name}"]
    if namespace:
        args += ["-r", f"__ns:={namespace}"]
    for path in parameter_files:
        args += ["--params-file", path]
    for name, value in parameters.items():
        # JSON is valid YAML; it quotes strings and writes lists as [..].
        args += ["-p", f"{name}:={json.dumps(value)}"]
    for source, target in remappings:
        args += ["-r", f"{source}:={target}"]
    return args


def spawn_node(
    module: str,
    parameters: Mapping[str, Any],
    env: Mapping[str, str] | None = None,
    log: IO[str] | None = None,
    node_name: str | None = None,
    **wiring: Any,
) -> subprocess.Popen:
    """Run ``python -m <module>`` with ROS parameters (and a node name, if given).

    ``wiring`` takes ``ros_args``' namespace, parameter_files and remappings.
    Output goes to ``log`` (stdout and stderr together) when given; otherwise
    both are piped. Give a long-running node a log file: nobody drains a pipe
    while it runs, and a full pipe would block the node.
    """
    return subprocess.Popen(
        [sys.executable, "-m", module, *ros_args(parameters, node_name, **wiring)],
        stdout=log if log is not None else subprocess.PIPE,
        stderr=subprocess.STDOUT if log is not None else subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def run_handshake(parameters: Mapping[str, Any], timeout_s: float = 120.0) -> tuple[int | None, dict, str]:
    """Run chunk_executor_node's start-up handshake; return (exit code, its JSON line, stderr).

    The executor prints its outcome as one JSON line on stdout. Unless the
    parameters say otherwise it runs with ``handshake_only`` (check the robot
    against the server, then exit); a full executor given a refused or
    failing first handshake exits the same way, but an accepted one keeps
    streaming. A run that prints none, or does not finish within
    ``timeout_s``, is reported as such in the returned dict rather than raised.
    """
    executor = spawn_node("lerobot_ros.executor.node", {"handshake_only": True, **parameters})
    try:
        stdout, stderr = executor.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        stop(executor)
        return None, {"handshake": "no answer", "reason": f"executor did not finish within {timeout_s:.0f} s"}, ""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1]) if lines else {"handshake": "no output", "reason": stderr.strip()[-500:]}
    return executor.returncode, result, stderr


def stop(process: subprocess.Popen, timeout_s: float = 15.0) -> int:
    """SIGINT, then SIGKILL if the process has not exited after ``timeout_s``."""
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
