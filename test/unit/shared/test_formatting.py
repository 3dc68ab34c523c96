"""The tree is formatted and linted by ruff (ruff.toml: 99 columns, pycodestyle, pyflakes, isort,
bugbear), so no line budget and no reviewer decides its shape.

Fix a failure with ``.venv/bin/ruff format . && .venv/bin/ruff check --fix .``.
"""

from __future__ import annotations

import subprocess
import sys

from support.paths import REPO

CHECKED = ["lerobot_ros", "bench", "test", "launch", "deploy"]


def ruff(*arguments: str, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ruff", *arguments],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_tree_is_formatted_by_ruff():
    result = ruff("format", "--check", "--diff", *CHECKED)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_ruff_check_finds_nothing():
    result = ruff("check", "--output-format", "concise", *CHECKED)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]


def test_the_project_configuration_flags_a_line_over_99_columns_and_unsorted_imports(tmp_path):
    (tmp_path / "ruff.toml").write_text((REPO / "ruff.toml").read_text())
    (tmp_path / "scratch.py").write_text(
        "import sys\nimport os\n\nVALUE = " + repr("x" * 60) + " + " + repr("y" * 40) + "\n"
        "print(os, sys, VALUE)\n"
    )
    result = ruff("check", "--output-format", "concise", "--no-cache", ".", cwd=tmp_path)
    assert result.returncode == 1, result.stdout
    assert "E501" in result.stdout and "I001" in result.stdout, result.stdout
