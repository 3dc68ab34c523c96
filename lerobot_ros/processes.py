"""Start lerobot_ros nodes as child processes and stop them cleanly.

Used by the demo commands, the evaluation, the benchmarks and the
integration tests, so all of them run the nodes exactly as a user does:
separate OS processes talking over a real RMW, wired as ``launch_plan``
says (``start_processes`` runs a whole plan).

Invariant: whatever is started here is stopped here, with SIGINT first (a
node's own clean shutdown: the executor closes its session, the server
drains) and SIGKILL only after a bounded wait; a plan's processes stop in
reverse order, so an executor closes its session while its server still
answers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from lerobot_ros.launch_plan import Plan, ros_args


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


def run_handshake(
    parameters: Mapping[str, Any], timeout_s: float = 120.0
) -> tuple[int | None, dict, str]:
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
        return (
            None,
            {
                "handshake": "no answer",
                "reason": f"executor did not finish within {timeout_s:.0f} s",
            },
            "",
        )
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    result = (
        json.loads(lines[-1])
        if lines
        else {"handshake": "no output", "reason": stderr.strip()[-500:]}
    )
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


def start_processes(plan: Plan, log_dir: Path) -> list[tuple[str, subprocess.Popen]]:
    """Every node of ``plan`` as a ``python -m`` process, in the plan's order, each logging to
    ``log_dir/<label>.log``; (label, process) pairs, labelled by node name."""
    processes = []
    names = [node.name for node in plan.nodes]
    for node in plan.nodes:
        # A fleet runs several nodes of one name, each in its own namespace: those are told apart
        # by it.
        label = (
            node.name
            if names.count(node.name) == 1
            else f"{node.namespace.strip('/').replace('/', '_')}_{node.name}"
        )
        with (log_dir / f"{label}.log").open("w") as log:
            processes.append(
                (
                    label,
                    spawn_node(
                        node.module,
                        node.parameters,
                        env=plan.environment,
                        log=log,
                        node_name=node.name,
                        namespace=node.namespace,
                        parameter_files=node.parameter_files,
                        remappings=node.remappings,
                    ),
                )
            )
    return processes


def stop_processes(processes: list[tuple[str, subprocess.Popen]]) -> dict[str, int]:
    """Stop what ``start_processes`` started; each label's exit code."""
    # The executor first, so it closes its session while the server still answers.
    return {name: stop(process) for name, process in reversed(processes)}
