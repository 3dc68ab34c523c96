"""The reach task (cube placement, success, timeout, reset) and the scripted expert that solves
it."""

from __future__ import annotations

import numpy as np
import pytest

from lerobot_ros.sim.arm import ArmCamera, ArmConfig, SimulatedArm
from lerobot_ros.sim.expert import ExpertPlan
from lerobot_ros.sim.kinematics import Chain
from lerobot_ros.sim.so101 import HOME_POSE, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS
from lerobot_ros.sim.task import GRIPPER_CLOSED, Phase, ReachTask, TaskConfig, cube_position

CONFIG = TaskConfig(96, 128, seed=7, timeout_s=5.0, reset_delay_s=0.5)
DT = 0.01


def run_expert(config: TaskConfig, episode: int, noise: float, seed: int) -> ReachTask:
    """The expert's plan, commanded at 30 Hz into the simulated arm stepped at 100 Hz, until an
    outcome."""
    arm, task = SimulatedArm(ArmConfig()), ReachTask(config, 0.0, episode)
    plan = ExpertPlan(config, arm.position, task.cube, np.random.default_rng(seed), noise)
    for step in range(int(config.timeout_s / DT) + 2):
        now = step * DT
        if step % 3 == 0:
            arm.command(plan.command_at(now))
        arm.step(DT)
        task.update(arm.position, now + DT)
        if task.phase is not Phase.RUNNING:
            break
    return task


def test_inverse_and_forward_kinematics_agree_on_every_cube():
    chain = Chain(96, 128)
    for episode in range(50):
        cube = cube_position(CONFIG, episode)
        lift, elbow, wrist = chain.reach_down(cube, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS)
        np.testing.assert_allclose(chain.tip([0.0, lift, elbow, wrist, 0.0, 0.0]), cube, atol=1e-9)
    assert (
        chain.reach_down(np.array([127.0, 95.0]), JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS) is None
    )


def test_cubes_are_seeded_per_episode_and_visible_in_the_camera():
    cubes = [tuple(cube_position(CONFIG, episode)) for episode in range(20)]
    assert len(set(cubes)) == 20
    assert cubes == [tuple(cube_position(CONFIG, episode)) for episode in range(20)]
    assert tuple(cube_position(TaskConfig(96, 128, seed=8), 0)) != cubes[0]
    camera = ArmCamera(96, 128)
    first, second = (
        camera.render(np.array(HOME_POSE), cubes[0]),
        camera.render(np.array(HOME_POSE), cubes[1]),
    )
    x, y = (int(round(v)) for v in cubes[0])
    assert np.abs(first[y, x].astype(int) - second[y, x].astype(int)).sum() > 30, (
        "the cube is drawn where it is"
    )


def test_success_needs_the_closed_gripper_at_the_cube_and_is_final_until_the_reset():
    task = ReachTask(CONFIG, 0.0)
    lift, elbow, wrist = Chain(96, 128).reach_down(
        task.cube, JOINT_LOWER_LIMITS, JOINT_UPPER_LIMITS
    )
    at_cube_open = np.array([0.0, lift, elbow, wrist, 0.0, 1.0])
    assert task.update(np.array(HOME_POSE), 0.1) is False and task.phase is Phase.RUNNING
    task.update(at_cube_open, 0.2)
    assert task.phase is Phase.RUNNING and task.status(0.2).distance < 1e-6
    at_cube_closed = at_cube_open.copy()
    at_cube_closed[5] = GRIPPER_CLOSED
    task.update(at_cube_closed, 1.5)
    status = task.status(1.9)
    assert status.phase is Phase.SUCCESS and status.elapsed_s == pytest.approx(1.5)
    assert task.update(np.array(HOME_POSE), 1.9) is False and task.phase is Phase.SUCCESS
    assert task.update(np.array(HOME_POSE), 2.0) is True
    assert task.episode == 1 and task.phase is Phase.RUNNING and task.status(2.0).elapsed_s == 0.0
    np.testing.assert_array_equal(task.cube, cube_position(CONFIG, 1))


def test_an_episode_times_out_as_a_failure():
    task = ReachTask(CONFIG, 10.0)
    task.update(np.array(HOME_POSE), 14.9)
    assert task.phase is Phase.RUNNING
    task.update(np.array(HOME_POSE), 15.0)
    assert task.phase is Phase.FAILURE and task.status(15.3).elapsed_s == pytest.approx(5.0)


def test_the_noisy_expert_solves_every_episode_and_its_demonstrations_differ():
    outcomes = [run_expert(CONFIG, episode, noise=1.0, seed=episode) for episode in range(30)]
    assert all(task.phase is Phase.SUCCESS for task in outcomes)
    times = [task.status(0.0).elapsed_s for task in outcomes]
    assert 1.0 < min(times) and max(times) < 4.0
    cube = cube_position(CONFIG, 0)
    plans = [
        ExpertPlan(CONFIG, HOME_POSE, cube, np.random.default_rng(seed), 1.0) for seed in (1, 2)
    ]
    assert not np.allclose(plans[0].command_at(1.0), plans[1].command_at(1.0))
    replay = ExpertPlan(CONFIG, HOME_POSE, cube, np.random.default_rng(1), 1.0)
    np.testing.assert_array_equal(plans[0].command_at(1.0), replay.command_at(1.0))


def test_the_expert_starts_where_the_arm_is_and_ends_closed_on_the_cube():
    cube = cube_position(CONFIG, 3)
    plan = ExpertPlan(CONFIG, HOME_POSE, cube, np.random.default_rng(0), 0.0)
    np.testing.assert_allclose(plan.command_at(0.0), HOME_POSE)
    final = plan.command_at(plan.duration_s + 1.0)
    assert final[5] <= GRIPPER_CLOSED
    np.testing.assert_allclose(Chain(96, 128).tip(final), cube, atol=1e-9)
    # Cubes at the edge of the reach: the noisy grasp point is pulled back until the hand reaches
    # it.
    edge = TaskConfig(96, 128, seed=3)
    for episode in (75, 182):
        plan = ExpertPlan(
            edge, HOME_POSE, cube_position(edge, episode), np.random.default_rng(episode), 1.0
        )
        assert (
            np.linalg.norm(
                Chain(96, 128).tip(plan.command_at(10.0)) - cube_position(edge, episode)
            )
            <= 0.06 * 96 / 3 + 1e-9
        )
    with pytest.raises(ValueError, match="noise must not be negative"):
        ExpertPlan(CONFIG, HOME_POSE, cube, np.random.default_rng(0), -1.0)
