"""The README's two commands, the test command's pytest arguments and the demo's SmolVLA, run as
written (issue 33).

Read from README.md, docs/reference/setup.md and docs/tutorials/demo.md through
support/doc_commands.py:

* the demo command (``./scripts/run_demo.sh``) runs as written with
  ``--duration 5 --output-dir <tmp>`` appended (the demo's 30 s and its
  output in the working directory are the only changes), in a ROS domain of
  its own: set-up check, then the demo's whole loop, which must report ok;
* the test command (``./scripts/run_tests.sh``) is what CI runs: ``.ci/run``
  executes exactly it (checked here; the suite cannot run itself inside one
  of its tests);
* ``./scripts/run_tests.sh -k contract -x`` (the pytest arguments example of
  both pages) runs as written: a set-up check and the contract tests;
* docs/tutorials/demo.md's ``.venv/bin/python -m lerobot_ros.demo --policy smolvla``
  runs as written with the same ``--duration 5 --output-dir <tmp>`` appended,
  and serves the tiny SmolVLA.

Both scripts begin with ``scripts/setup_env.sh``; run from a test it must find
the venv up to date (``run_tests.sh`` made it so): a test never reinstalls
the venv it runs in.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from support import domains
from support.doc_commands import block_run_by, is_complete, words
from support.paths import REPO

QUICKSTART = next(
    block for block in block_run_by("README.md", __file__) if block.language == "bash"
)
DEMO = next(command for command in QUICKSTART.commands if "run_demo.sh" in command)
TESTS = next(command for command in QUICKSTART.commands if "run_tests.sh" in command)
#: The complete commands of the paragraphs both pages mark for this file (the pytest arguments
#: example).
ARGUMENTS = sorted(
    {
        span
        for page in ("README.md", "docs/reference/setup.md")
        for block in block_run_by(page, __file__)
        if block.language == "inline"
        for span in block.commands
        if is_complete(span)
    }
)


def setup_is_current() -> None:
    env = {**os.environ, "LEROBOT_ROS_PRINT_INPUTS_HASH": "1"}
    wanted = subprocess.run(
        [str(REPO / "scripts" / "setup_env.sh")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout.strip()
    stamp = Path(os.environ.get("LEROBOT_ROS_VENV", REPO / ".venv")) / ".lerobot_ros_setup"
    if not stamp.is_file() or stamp.read_text().strip() != wanted:
        pytest.fail(
            "the venv is not up to date with scripts/setup_env.sh's inputs: the README's commands "
            "would "
            "reinstall it under the running suite; run scripts/setup_env.sh (run_tests.sh does) "
            "first"
        )


SMOLVLA = [
    span
    for block in block_run_by("docs/tutorials/demo.md", __file__)
    for span in block.commands
    if is_complete(span)
]


def own_domain() -> dict:
    # A domain of its own: the suite's shared server and the launch tests' demo answer at /lerobot,
    # and so does test/nodes/test_demo.py's demo.
    return {**os.environ, "ROS_DOMAIN_ID": str(domains.domain("readme_demo"))}


def run_as_written(command: str, *appended: str, env: dict | None = None, timeout_s: float = 600):
    return subprocess.run(
        words(command) + list(appended),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
    )


def test_ci_runs_the_readme_test_command():
    lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert f"exec {' '.join(words(TESTS))}" in lines, (
        f".ci/run does not run the README's `{TESTS}`"
    )


@pytest.mark.serial  # the demo's "ok" asks for commands at half its rate at least
def test_the_readme_demo_command_runs_the_demo(tmp_path):
    setup_is_current()
    result = run_as_written(
        DEMO, "--duration", "5", "--output-dir", str(tmp_path / "out"), env=own_domain()
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "is up to date" in result.stdout + result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["final_state"] == "STREAMING", summary


def test_both_pages_pass_pytest_arguments_as_the_readme_writes_them():
    assert ARGUMENTS == ["./scripts/run_tests.sh -k contract -x"], ARGUMENTS
    setup_is_current()
    # In one process: the arguments reaching pytest is what is checked here, and three workers
    # would each collect the whole suite for 14 tests.
    env = {**os.environ, "LEROBOT_ROS_TEST_WORKERS": "0"}
    for command in ARGUMENTS:
        result = run_as_written(command, env=env)
        output = result.stdout + result.stderr
        assert result.returncode == 0, output[-3000:]
        assert " passed" in output and "deselected" in output, output[-3000:]


@pytest.mark.serial  # as the demo command above
def test_the_demo_page_serves_the_tiny_smolvla_as_written(tmp_path):
    assert SMOLVLA == [".venv/bin/python -m lerobot_ros.demo --policy smolvla"], SMOLVLA
    result = run_as_written(
        SMOLVLA[0], "--duration", "5", "--output-dir", str(tmp_path / "out"), env=own_domain()
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["ok"] is True and summary["final_state"] == "STREAMING", summary
    assert summary["policy"] == "smolvla", summary
