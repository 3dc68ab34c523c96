"""What the evaluation counts, and the processes it plans (no ROS)."""

from __future__ import annotations

import pytest

from lerobot_ros.recording.evaluate import EpisodeTally, evaluation_plan


def test_only_episodes_started_while_streaming_count_and_each_once():
    tally = EpisodeTally(2)
    assert tally.on_status(0, "RUNNING", 0.0, streaming=False) is None
    # started before the loop streamed
    assert tally.on_status(0, "RUNNING", 3.0, streaming=True) is None
    assert tally.on_status(0, "SUCCESS", 3.5, streaming=True) is None
    assert tally.on_status(1, "RUNNING", 0.0, streaming=True) == "started"
    assert tally.on_status(1, "RUNNING", 0.1, streaming=True) is None
    assert tally.on_status(1, "SUCCESS", 2.5, streaming=True) == "ended"
    assert tally.on_status(1, "SUCCESS", 2.5, streaming=True) is None  # the periodic repeat
    assert tally.on_status(2, "RUNNING", 0.0, streaming=True) == "started"
    assert tally.on_status(2, "FAILURE", 10.0, streaming=True) == "ended"
    assert tally.done and tally.on_status(3, "RUNNING", 0.0, streaming=True) is None
    assert tally.summary() == {
        "episodes": 2,
        "successes": 1,
        "success_rate": 0.5,
        "time_to_success_s_mean": 2.5,
        "time_to_success_s_median": 2.5,
        "outcomes": [
            {"episode": 1, "outcome": "SUCCESS", "elapsed_s": 2.5},
            {"episode": 2, "outcome": "FAILURE", "elapsed_s": 10.0},
        ],
    }
    with pytest.raises(ValueError, match="at least 1 episode"):
        EpisodeTally(0)


def test_an_unbounded_tally_counts_every_episode_started_while_streaming_and_is_never_done():
    tally = EpisodeTally(None)
    # already running when counting began
    assert tally.on_status(4, "RUNNING", 6.0, streaming=True) is None
    assert tally.on_status(4, "FAILURE", 10.0, streaming=True) is None
    for episode in range(5, 9):
        assert tally.on_status(episode, "RUNNING", 0.0, streaming=True) == "started"
        assert tally.on_status(episode, "SUCCESS", 3.0, streaming=True) == "ended"
    assert not tally.done and tally.summary()["episodes"] == tally.summary()["successes"] == 4


def test_the_plan_is_the_demo_with_the_task_set_and_an_optional_recorder(tmp_path):
    plan = evaluation_plan(
        "ckpt", tmp_path, timeout_s=4.0, seed=9, record=str(tmp_path / "rollouts")
    )
    by_executable = {node.executable: node for node in plan.nodes}
    assert set(by_executable) == {
        "policy_server_node",
        "sim_robot_node",
        "chunk_executor_node",
        "episode_recorder_node",
    }
    sim = by_executable["sim_robot_node"]
    assert sim.parameters["task_timeout_s"] == 4.0 and sim.parameters["seed"] == 9
    assert (
        by_executable["episode_recorder_node"].namespace
        == sim.namespace
        == by_executable["chunk_executor_node"].namespace
    )
    assert "episode_recorder_node" not in {
        node.executable for node in evaluation_plan("ckpt", tmp_path, 4.0, 9).nodes
    }


def test_the_plan_can_turn_rtc_off_and_slow_the_server_down_for_the_rtc_comparison(tmp_path):
    default = {node.executable: node for node in evaluation_plan("ckpt", tmp_path, 4.0, 9).nodes}
    assert default["chunk_executor_node"].parameters["rtc_requested"] is True
    assert default["policy_server_node"].parameters["inject_delay_s"] == 0.0
    compared = {
        node.executable: node
        for node in evaluation_plan("ckpt", tmp_path, 4.0, 9, rtc=False, inject_delay_s=0.1).nodes
    }
    assert compared["chunk_executor_node"].parameters["rtc_requested"] is False
    assert compared["policy_server_node"].parameters["inject_delay_s"] == 0.1
