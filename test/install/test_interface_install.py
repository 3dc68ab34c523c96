"""Reinstalling the interfaces never kills the nodes already running from the venv.

The set-up (and so the demo and test commands) reinstalls the generated
interface libraries whenever its inputs change. It once wrote them over the
files running nodes had mapped, and every node of the host died by SIGSEGV
at once (docs/reference/reliability.md, "simultaneous crash"), identical bytes or not.
This test runs the real install step under a live publisher of one of those
messages and requires the publisher to outlive it.
"""

import subprocess
import sys
import time
from pathlib import Path

from support.paths import REPO

PUBLISHER = """
import sys, threading, time, rclpy
from lerobot_ros.msg import TaskStatus
rclpy.init()
node = rclpy.create_node("interface_install_probe")
publisher = node.create_publisher(TaskStatus, "interface_install_probe", 1)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
print("publishing", flush=True)
end = time.monotonic() + 120  # bounded even if the test never says stop
count = 0
while not stop.is_set() and time.monotonic() < end:
    publisher.publish(TaskStatus())  # builds a message through the interface's C library each time
    count += 1
    time.sleep(0.01)
print("published", count, flush=True)
"""


def test_a_node_publishing_an_interface_message_survives_its_reinstall():
    venv = Path(sys.prefix)
    publisher = subprocess.Popen(
        [sys.executable, "-c", PUBLISHER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert publisher.stdout.readline().strip() == "publishing"
        install = subprocess.run(
            [str(REPO / "scripts" / "build_interfaces.sh"), str(venv)],
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert install.returncode == 0, install.stderr
        assert "interfaces installed into" in install.stdout
        time.sleep(1.0)  # the damage shows at the next call into the rewritten library
        out, _ = publisher.communicate(input="", timeout=30)
    finally:
        if publisher.poll() is None:
            publisher.kill()
            publisher.wait()
    assert publisher.returncode == 0, (
        f"the publisher died during the reinstall (exit {publisher.returncode})"
    )
    assert out.startswith("published ")
