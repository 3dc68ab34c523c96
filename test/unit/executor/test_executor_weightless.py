"""The robot side never pulls in torch or LeRobot (it runs next to the robot)."""

import json
import subprocess
import sys

HEAVY = ("torch", "lerobot", "transformers", "diffusers")


def imported_heavy_modules(*modules: str) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {list(modules)!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY!r})))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_executor_code_path_imports_neither_torch_nor_lerobot():
    assert imported_heavy_modules(
        "lerobot_ros.executor.node",
        "lerobot_ros.executor.handshake",
        "lerobot_ros.executor.settings",
        "lerobot_ros.executor.observation_assembly",
        "lerobot_ros.executor.pending_request",
        "lerobot_ros.executor.session_state",
        "lerobot_ros.executor.session_verbs",
        "lerobot_ros.executor.goal_steps",
        "lerobot_ros.executor.handshake_types",
        "lerobot_ros.executor.chunks",
        "lerobot_ros.wire.output_modes",
        "lerobot_ros.statistics",
        "lerobot_ros.executor.core",
        "lerobot_ros.executor.worker",
        "lerobot_ros.executor.server_link",
        "lerobot_ros.executor.session_client",
        "lerobot_ros.wire.data_plane",
        "lerobot_ros.wire.images",
        "lerobot_ros.qos",
        "lerobot_ros.telemetry",
        "lerobot_ros.wire",
        "lerobot_ros.contract",
        "lerobot_ros.msg",
        "lerobot_ros.srv",
    ) == []


def test_the_check_itself_sees_torch_when_the_server_side_is_imported():
    # Guards the test above against passing vacuously.
    assert "torch" in imported_heavy_modules("lerobot_ros.server.checkpoint")
