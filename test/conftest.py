"""Fixtures only: an isolated ROS graph per test run, checkpoints built once, shared processes.

Every run gets its own ROS_DOMAIN_ID and localhost-only discovery so that
concurrent runs (and robots on the developer's network) never hear each
other, and the Hugging Face Hub is never contacted.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.ros import free_port
from support.servers import start_server


def _isolate_ros_graph() -> None:
    # Domain ids 1-100 are safe on every platform; derive one from the pid so
    # parallel runs on one machine differ. Always override: the developer's
    # shell may point at a domain with real robots in it.
    os.environ["ROS_DOMAIN_ID"] = os.environ.get("LEROBOT_ROS_TEST_DOMAIN_ID") or str(
        1 + os.getpid() % 100
    )
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


_isolate_ros_graph()


def pytest_collection_finish(session) -> None:
    """Start the slow set-ups the collected tests need (support/background.py), so they overlap the
    others."""
    from support import background

    background.start_wanted(
        {name for item in session.items for name in getattr(item, "fixturenames", ())}
    )


def _timed(phase: str):
    @pytest.hookimpl(wrapper=True)
    def hook(item, *args):
        from support import timings

        if not timings.TIMINGS_FILE:
            return (yield)
        with timings.PhaseTimer(item.nodeid, phase):
            return (yield)

    return hook


pytest_runtest_setup = _timed("setup")
pytest_runtest_call = _timed("call")
pytest_runtest_teardown = _timed("teardown")


def pytest_sessionfinish(session) -> None:
    from support import background

    background.remove_all()


@pytest.fixture(scope="session")
def act_checkpoint(tmp_path_factory) -> Path:
    """A real ACT checkpoint for the simulated 6-joint arm, random weights."""
    from lerobot_ros.sim.default_policy import build_act_checkpoint

    return build_act_checkpoint(tmp_path_factory.mktemp("act_so101"))


@pytest.fixture(scope="session")
def smolvla_checkpoint(tmp_path_factory) -> Path:
    """A tiny RTC-capable SmolVLA checkpoint for the same arm, random weights, built offline."""
    from lerobot_ros.sim.default_policy import build_smolvla_checkpoint

    return build_smolvla_checkpoint(tmp_path_factory.mktemp("smolvla_so101"))


@pytest.fixture(scope="module")
def runner(act_checkpoint):
    """The request path's policy runner on ``act_checkpoint`` (CPU), one per test module."""
    from support.request_harness import act_runner

    return act_runner(act_checkpoint)


@pytest.fixture(scope="session")
def ros_node():
    """An rclpy node in the test process, for clients and subscribers."""
    import rclpy

    rclpy.init()
    node = rclpy.create_node(f"test_client_{os.getpid()}")
    yield node
    node.destroy_node()
    rclpy.try_shutdown()


@pytest.fixture(scope="session")
def policy_server(act_checkpoint, tmp_path_factory, ros_node):
    """A real policy_server_node process serving ``act_checkpoint`` at /lerobot.

    Shared by the tests that leave it as they found it (sessions they open,
    they close). Capacity 4, idle sessions collected after 3 s, audit log,
    capture and HTTP endpoint on. Stopped with SIGINT; it must exit cleanly.
    """
    from lerobot_ros.processes import stop

    directory = tmp_path_factory.mktemp("server")
    server = start_server(
        act_checkpoint,
        directory,
        ros_node,
        max_sessions=4,
        session_idle_timeout_s=3.0,
        capture_dir=str(directory / "lerobot_capture"),
        http_port=free_port(),
    )
    yield server
    exit_code = stop(server.process)
    assert exit_code == 0, (
        f"policy_server_node exited with {exit_code}:\n{server.log_text()[-4000:]}"
    )


@pytest.fixture(scope="session")
def diffusion_checkpoint(tmp_path_factory) -> Path:
    """A small random Diffusion checkpoint; 100 denoising steps make each request take ~0.5-1 s
    here."""
    from support.policies import build_diffusion_checkpoint

    return build_diffusion_checkpoint(tmp_path_factory.mktemp("diffusion"), inference_steps=100)


@pytest.fixture
def launched(tmp_path, ros_node):
    """Start robots and executors; everything started is stopped at the end."""
    started: list = []

    from support.executor_processes import Executor, Robot

    def robot(prefix, **kwargs) -> Robot:
        started.append(Robot(tmp_path, prefix, **kwargs))
        return started[-1]

    def executor(name, parameters) -> Executor:
        started.append(Executor(ros_node, tmp_path, name, parameters))
        return started[-1]

    robot.executor = executor
    yield robot
    for thing in reversed(started):
        if isinstance(thing, Executor) and thing.process.poll() is None:
            thing.stop()
        elif isinstance(thing, Robot):
            thing.stop()
