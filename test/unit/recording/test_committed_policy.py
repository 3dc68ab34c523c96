"""The trained SmolVLA committed with the package loads, and its quoted score is the one
docs/reference/benchmarks.md has."""

from __future__ import annotations

import json
import re

import pytest

from lerobot_ros.policy_names import EVALUATION_FILE, committed_trained_smolvla
from lerobot_ros.protocol.checkpoint_layout import CONTRACT_FILE
from lerobot_ros.recording.train import policy_options
from lerobot_ros.recording.trained_policy import (
    EVALUATION_EPISODES,
    EVALUATION_SEED,
    EVALUATION_TIMEOUT_S,
    evaluation_line,
)
from lerobot_ros.sim.so101 import SO101_JOINT_NAMES
from support.paths import REPO

# One worker runs this module's tests, so its module-scoped fixtures start once.
pytestmark = pytest.mark.xdist_group("test_committed_policy")

COMMITTED = committed_trained_smolvla()


@pytest.fixture(scope="module")
def evaluation() -> dict:
    assert COMMITTED is not None, (
        "lerobot_ros/sim/policies/smolvla_so101_reach_v1 is missing its files"
    )
    return json.loads((COMMITTED / EVALUATION_FILE).read_text())


def test_it_loads_as_a_servable_rtc_policy_for_the_simulated_arm():
    from lerobot_ros.server.policy.checkpoint import load_policy

    capabilities = load_policy(str(COMMITTED), device="cpu").capabilities
    assert (
        capabilities.policy_type == "smolvla"
        and capabilities.rtc_supported
        and capabilities.rtc_enabled
    )
    assert capabilities.action_names == capabilities.state_names == SO101_JOINT_NAMES
    assert (capabilities.chunk_size, capabilities.trained_fps) == (
        policy_options("smolvla")["chunk_size"],
        30.0,
    )
    # It was trained on the recorder's 48x64 frames; the server resizes the camera's to that.
    assert [(camera.height, camera.width) for camera in capabilities.cameras] == [(48, 64)]


def test_its_recipe_and_its_evaluation_are_the_ones_the_numbers_quote(evaluation):
    training = json.loads((COMMITTED / CONTRACT_FILE).read_text())["training"]
    assert {key: training[key] for key in policy_options("smolvla")} == policy_options("smolvla")
    assert (training["policy"], training["steps"], training["batch_size"], training["seed"]) == (
        "smolvla",
        8000,
        8,
        0,
    )
    # The demo's configuration: RTC on, no injected delay, the held-out cubes, the install's
    # episode count.
    assert (
        evaluation["rtc_requested"],
        evaluation["inject_delay_s"],
        evaluation["rtc_active"],
    ) == (True, 0.0, True)
    assert (evaluation["episodes"], evaluation["seed"], evaluation["task_timeout_s"]) == (
        EVALUATION_EPISODES,
        EVALUATION_SEED,
        EVALUATION_TIMEOUT_S,
    )
    assert evaluation["error"] == "" and len(evaluation["outcomes"]) == evaluation["episodes"]
    assert evaluation["successes"] == sum(
        outcome["outcome"] == "SUCCESS" for outcome in evaluation["outcomes"]
    )
    assert f"success in {evaluation['successes']} of {evaluation['episodes']}" in evaluation_line(
        COMMITTED
    )


def test_docs_quote_the_committed_evaluation(evaluation):
    section = (
        (REPO / "docs" / "reference" / "benchmarks.md")
        .read_text()
        .split("<!-- bench:rtc_reach_evaluation -->")[1]
    )
    quoted = re.search(
        r"evaluation\.json \(the demo's configuration: RTC on, 0 ms, seed (\d+)\), which "
        r"docs/tutorials/demo\.md "
        r"quotes, is an earlier run: success in (\d+) of (\d+)",
        section,
    )
    assert quoted is not None, (
        "the rtc_reach_evaluation section does not quote the committed evaluation.json"
    )
    assert (int(quoted[1]), int(quoted[2]), int(quoted[3])) == (
        evaluation["seed"],
        evaluation["successes"],
        evaluation["episodes"],
    )
    assert (
        f"{evaluation['successes']} of {evaluation['episodes']}"
        in (REPO / "docs" / "tutorials" / "demo.md").read_text()
    )
