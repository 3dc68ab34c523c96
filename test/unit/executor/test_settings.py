"""The executor's parameter table, its cross-field rules and timing warnings (settings.py)."""

from __future__ import annotations

from lerobot_ros.executor.settings import ExecutorSettings, default_client_id, timing_warnings
from support.executor_harness import params, settings


def test_default_parameters_with_joints_and_a_camera_are_valid():
    assert ExecutorSettings.problems_of(params()) == []
    made = settings()
    assert made.camera_transports == ("raw",)
    assert made.output_topic == "/forward_position_controller/commands"
    assert (
        settings(output_mode="joint_trajectory").output_topic
        == "/joint_trajectory_controller/joint_trajectory"
    )
    assert settings(output_mode="joint_state", output_topic="/x").output_topic == "/x"
    assert made.state_dim == 3 and settings(state_include_velocity=True).state_dim == 6


def test_every_parameter_problem_is_reported_at_once():
    problems = ExecutorSettings.problems_of(
        params(
            joint_names=[""],
            fps=0.0,
            camera_topics=["/a", "/b"],
            camera_transports=["h264"],
            output_mode="servo",
            fallback="brake",
            jpeg_quality=101,
            buffer_time_s=-1.0,
            client_id="bad-id",
            server_namespace="lerobot",
            max_step_per_tick=-0.1,
        )
    )
    text = "\n".join(problems)
    for expected in (
        "'joint_names' is empty",
        "'fps' is 0.0",
        "'camera_topics' holds 2 topics for 1 cameras",
        "'camera_transports' has ['h264']",
        "'output_mode' is 'servo'",
        "'fallback' is 'brake'",
        "'jpeg_quality' is 101",
        "'buffer_time_s' is -1.0",
        "'client_id'",
        "'server_namespace'",
        "'max_step_per_tick' is -0.1",
    ):
        assert expected in text, (expected, problems)


def test_limit_lists_must_match_the_joints_and_not_cross():
    problems = ExecutorSettings.problems_of(
        params(joint_lower_limits=[0.0, 1.0], joint_upper_limits=[1.0, 0.0, 1.0])
    )
    assert any("'joint_lower_limits' holds 2 values, expected none or 3" in p for p in problems)
    problems = ExecutorSettings.problems_of(
        params(joint_lower_limits=[0.0, 2.0, 0.0], joint_upper_limits=[1.0, 1.0, 1.0])
    )
    assert any("above 'joint_upper_limits' for ['b']" in p for p in problems)
    problems = ExecutorSettings.problems_of(
        params(reconnect_backoff_initial_s=9.0, reconnect_backoff_max_s=1.0)
    )
    assert any("reconnect_backoff_initial_s" in p for p in problems)


def test_handshake_only_needs_only_the_joints():
    assert (
        ExecutorSettings.problems_of(params(handshake_only=True, fps=0.0, camera_topics=[""]))
        == []
    )
    assert (
        "'joint_names' is empty"
        in ExecutorSettings.problems_of(params(handshake_only=True, joint_names=[""]))[0]
    )
    assert settings(handshake_only=True, fps=0.0).failsafe is None  # it never streams


def test_generated_client_id_is_a_valid_name_from_host_and_namespace():
    assert default_client_id("robot-7.lab", "/left/arm") == "robot_7_lab_left_arm"
    assert settings(client_id="").client_id == "host"


def test_timing_warnings_name_the_conflict_with_the_chunk_length():
    warnings = timing_warnings(settings(max_action_age_s=1.0, degraded_after_s=0.5), chunk_size=50)
    assert any("max_action_age_s 1.0" in w for w in warnings) and any(
        "degraded_after_s 0.5" in w for w in warnings
    )
    assert timing_warnings(settings(), chunk_size=50) == []


def test_append_mode_merges_once_per_chunk_replace_mode_once_the_buffer_is_reached():
    tight = settings(fps=30.0, buffer_time_s=0.5, degraded_after_s=1.5)  # chunk of 50: 1.67 s
    assert any("1.667 s in append mode" in w for w in timing_warnings(tight, chunk_size=50))
    assert timing_warnings(tight, chunk_size=50, replace_mode=True) == []  # 1.17 s between merges
