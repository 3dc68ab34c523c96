"""The real `ros2` command for tests: one skip condition, a bounded runner, and `ros2 launch` as a
process group.

The tools come from a ROS 2 install or from the vendored sources that
scripts/setup_env.sh installs into the venv; where neither is there, every
test that needs them skips with ``TOOLS_MISSING``. Every call is bounded and
runs in its own process group, so a timeout leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from support import domains


def _find_ros2() -> str | None:
    beside_python = Path(sys.prefix) / "bin" / "ros2"
    return str(beside_python) if beside_python.is_file() else shutil.which("ros2")


def _missing_reason() -> str | None:
    if _find_ros2() is None:
        return (
            "the ROS 2 command-line tools are not installed (no ros2 in this venv or on PATH): "
            "run "
            "scripts/setup_env.sh with ../shared/vendor/ros2_tools beside the checkout (or "
            "LEROBOT_ROS_ROS2_TOOLS naming it), or source a ROS 2 install"
        )
    try:
        from ament_index_python.packages import get_package_share_directory

        share = Path(get_package_share_directory("lerobot_ros"))
    except (ImportError, LookupError, OSError) as error:
        return f"ament cannot find lerobot_ros ({error!r}): run scripts/setup_env.sh"
    if not (share / "launch").is_dir():
        return f"{share} has no launch/ folder: run scripts/setup_env.sh"
    return None


ROS2 = _find_ros2()
#: Why the tool tests cannot run here, or None when they can.
TOOLS_MISSING = _missing_reason()
#: Mark for a test module or test that runs `ros2`.
requires_ros2_tools = pytest.mark.skipif(TOOLS_MISSING is not None, reason=TOOLS_MISSING or "")

#: The middleware the tool tests use (rmw_zenoh cannot be installed here).
RMW = "rmw_fastrtps_cpp"


def _own_domain() -> str:
    # The launch files start servers at fixed names (/lerobot), where the
    # suite's shared server may be serving: the tools get a domain of their own.
    return str(domains.domain("ros2_tools"))


#: The ROS domain every `ros2` of these helpers runs in.
DOMAIN_ID = _own_domain()


def _environment() -> dict:
    return {
        **os.environ,
        "RMW_IMPLEMENTATION": RMW,
        "ROS_DOMAIN_ID": DOMAIN_ID,
        "PYTHONUNBUFFERED": "1",
    }


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait(timeout=10)


def ros2(
    *arguments: str, timeout_s: float = 30.0, check: bool = True
) -> subprocess.CompletedProcess:
    """Run ``ros2 <arguments>`` to completion within ``timeout_s``; with ``check``, a non-zero exit
    fails the test."""
    command = [ROS2, *arguments]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        pytest.fail(
            f"`ros2 {' '.join(arguments)}` did not finish in {timeout_s} "
            f"s\nstdout:\n{stdout}\nstderr:\n{stderr}"
        )
    except BaseException:  # e.g. Ctrl-C of the test run: leave nothing behind
        _kill_group(process)
        raise
    result = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if check and result.returncode != 0:
        pytest.fail(
            f"`ros2 {' '.join(arguments)}` exited "
            f"{result.returncode}\nstdout:\n{stdout}\nstderr:\n{stderr}"
        )
    return result


def echo_once(topic: str, message_type: str, condition: str = "", timeout_s: float = 20.0) -> dict:
    """``ros2 topic echo --once [--filter CONDITION] TOPIC TYPE``: the first (matching) message,
    parsed from the YAML the tool prints. The type is given so that a topic not yet discovered is
    waited for. ``--no-lost-messages``: otherwise a dropped sample (a loaded machine, a best-effort
    status topic) prints "A message was lost!!!" with tab-indented counts into the same stdout,
    which is not YAML."""
    arguments = [
        "topic",
        "echo",
        "--once",
        "--no-lost-messages",
        *(["--filter", condition] if condition else []),
        topic,
        message_type,
    ]
    result = ros2(*arguments, timeout_s=timeout_s)
    return echoed_messages(result.stdout)[0]


def echoed_messages(stdout: str) -> list[dict]:
    """The messages ``ros2 topic echo`` printed, parsed; its "A message was lost!!!" reports (a
    line and
    tab-indented counts, interleaved with the YAML when a docs command runs without
    ``--no-lost-messages``) are left out."""
    kept = [
        line
        for line in stdout.splitlines()
        if not line.startswith("A message was lost") and not line.startswith("\ttotal count")
    ]
    return [yaml.safe_load(part) for part in "\n".join(kept).split("\n---") if part.strip()]


def stop_daemon() -> None:
    """Stop the `ros2` daemon that list-style verbs start in the background (it would outlive the
    tests)."""
    ros2("daemon", "stop", timeout_s=30)


def process_group_alive(group_id: int) -> bool:
    """Whether any process of the group ``group_id`` (a session leader's pid) is still alive."""
    try:
        os.killpg(group_id, 0)
    except ProcessLookupError:
        return False
    return True


class Ros2Process:
    """A long-running ``ros2 ...`` (launch, run) in its own process group, stopped as a terminal's
    Ctrl-C does."""

    def __init__(self, log_path: Path, *arguments: str):
        self.arguments = arguments
        self.log_path = log_path
        self._log = open(log_path, "w")  # noqa: SIM115 (closed in stop)
        self.process = subprocess.Popen(
            [ROS2, *arguments],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=_environment(),
            start_new_session=True,
        )

    def log_text(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def group_alive(self) -> bool:
        return process_group_alive(self.process.pid)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGINT to the whole process group; wait for it to be empty. Returns ros2's exit code.

        Fails (after killing what is left) when the group outlives ``timeout_s``.
        """
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
        deadline = time.monotonic() + timeout_s
        try:
            code = self.process.wait(timeout=timeout_s)
            while self.group_alive() and time.monotonic() < deadline:
                time.sleep(0.1)
            stray = self.group_alive()
        except subprocess.TimeoutExpired:
            code, stray = None, True
        if stray:
            _kill_group(self.process)
        self._log.close()
        if stray:
            pytest.fail(
                f"`ros2 {' '.join(self.arguments)}` left processes running {timeout_s} s after "
                "SIGINT:\n"
                f"{self.log_text()[-4000:]}"
            )
        return code
