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
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_executor_code_path_imports_neither_torch_nor_lerobot():
    assert (
        imported_heavy_modules(
            "lerobot_ros.executor.node",
            "lerobot_ros.executor.session.handshake",
            "lerobot_ros.executor.settings",
            "lerobot_ros.executor.requests.observation_assembly",
            "lerobot_ros.executor.requests.pending_request",
            "lerobot_ros.executor.session.session_state",
            "lerobot_ros.executor.control.tick",
            "lerobot_ros.executor.requests.request_cycle",
            "lerobot_ros.executor.fleet.failover",
            "lerobot_ros.executor.goals.goal_steps",
            "lerobot_ros.executor.session.handshake_types",
            "lerobot_ros.executor.requests.answer_rules",
            "lerobot_ros.protocol.wire.output_modes",
            "lerobot_ros.protocol.statistics",
            "lerobot_ros.executor.core",
            "lerobot_ros.executor.requests.network_worker",
            "lerobot_ros.executor.session.server_link",
            "lerobot_ros.executor.session.session_client",
            "lerobot_ros.protocol.wire.data_plane",
            "lerobot_ros.protocol.wire.images",
            "lerobot_ros.protocol.qos",
            "lerobot_ros.protocol.telemetry",
            "lerobot_ros.protocol.wire",
            "lerobot_ros.protocol.contract",
            "lerobot_ros.msg",
            "lerobot_ros.srv",
        )
        == []
    )


def test_the_check_itself_sees_torch_when_the_server_side_is_imported():
    # Guards the test above against passing vacuously.
    assert "torch" in imported_heavy_modules("lerobot_ros.server.policy.checkpoint")
