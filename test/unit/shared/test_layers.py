"""The package's layers hold: import-linter checks the contracts in ``.importlinter``.

Applications on top; the recorder and the stand-ins; the robot side, the GPU side and the
simulation (never importing each other); the node shell; the protocol at the bottom, imported
by all and importing none of them. The robot side, the node shell and the protocol import
neither torch nor LeRobot. The scratch tests copy the package, add one forbidden import and
check that the contract breaks on it, so the check itself cannot silently pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.paths import REPO

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_layers")


def lint_imports(root: Path) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(root))
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports_command;"
            " sys.exit(lint_imports_command())",
            "--no-cache",
        ],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=180,
    )


def test_every_layer_contract_is_kept():
    result = lint_imports(REPO)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout, result.stdout[-3000:]


@pytest.fixture(scope="module")
def package_copy(tmp_path_factory):
    root = tmp_path_factory.mktemp("layers")
    shutil.copytree(
        REPO / "lerobot_ros",
        root / "lerobot_ros",
        ignore=shutil.ignore_patterns("__pycache__", "policies"),
    )
    shutil.copy(REPO / ".importlinter", root / ".importlinter")
    return root


@pytest.mark.parametrize(
    "module, forbidden_import, contract",
    [
        (
            "server/sessions/capacity_model.py",
            "from lerobot_ros.executor.control import safety",
            "Applications on top",
        ),
        (
            "protocol/contract.py",
            "from lerobot_ros.sim import so101",
            "Applications on top",
        ),
        (
            "recording/episodes.py",
            "from lerobot_ros.executor.control import state_machine",
            "The recorder and the stand-ins",
        ),
        ("executor/core.py", "import torch", "import neither torch nor LeRobot"),
    ],
    ids=[
        "gpu_side_imports_robot_side",
        "protocol_imports_sim",
        "recorder_imports_executor",
        "robot_side_imports_torch",
    ],
)
def test_a_forbidden_import_breaks_its_contract(package_copy, module, forbidden_import, contract):
    path = package_copy / "lerobot_ros" / module
    original = path.read_text()
    try:
        path.write_text(original + f"\n{forbidden_import}  # scratch: must break a contract\n")
        result = lint_imports(package_copy)
    finally:
        path.write_text(original)
    assert result.returncode != 0, result.stdout[-3000:]
    broken = [line for line in result.stdout.splitlines() if "BROKEN" in line]
    assert any(contract.split()[0] in line for line in broken) or contract in result.stdout, (
        result.stdout[-3000:]
    )
    assert forbidden_import.split()[1] in result.stdout, result.stdout[-3000:]
