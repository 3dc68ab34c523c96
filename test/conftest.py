"""Fixtures and the run's plumbing: an isolated ROS graph per test process, checkpoints built once
per run, shared processes, parallel workers.

Every process that runs tests (a run without workers, or each xdist worker) gets its own block of
ROS domain ids (support/domains.py) and localhost-only discovery so that workers, concurrent runs
and robots on the developer's network never hear each other, and the Hugging Face Hub is never
contacted. Timing-sensitive tests (``@pytest.mark.serial``) run while no other worker runs one
(support/workers.py).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from support import domains, workers
from support.ros import free_port
from support.servers import start_server


def _isolate_ros_graph() -> None:
    # Always override the domain (support/domains.py, in pytest_configure): the developer's shell
    # may point at a domain with real robots in it.
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")


_isolate_ros_graph()


def _runs_workers(config) -> bool:
    return bool(getattr(config.option, "numprocesses", 0)) and config.option.dist != "no"


def pytest_configure(config) -> None:
    """Give this process its ROS domain block and the run's shared directory (support/workers.py):
    an xdist worker gets both from the controller; the controller hands them out; a run without
    workers takes its own."""
    if hasattr(config, "workerinput"):
        workers.join_run(config.workerinput["lerobot_ros_run_directory"])
        siblings = [int(b) for b in config.workerinput["lerobot_ros_blocks"].split(",")]
        domains.own_block(int(config.workerinput["lerobot_ros_block"]), siblings)
    elif _runs_workers(config):
        workers.start_run()
        config.lerobot_ros_blocks = domains.free_blocks(config.option.numprocesses)
        config.lerobot_ros_block_of = {}
    else:
        workers.start_run()
        domains.own_block(domains.free_blocks(1)[0], [])


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """The controller's: a worker gets a block no live worker holds (a restarted worker reuses
    the dead one's)."""
    config = node.config
    held = set(config.lerobot_ros_block_of.values())
    block = next(b for b in config.lerobot_ros_blocks if b not in held)
    config.lerobot_ros_block_of[node.gateway.id] = block
    node.workerinput["lerobot_ros_block"] = str(block)
    node.workerinput["lerobot_ros_blocks"] = ",".join(map(str, config.lerobot_ros_blocks))
    node.workerinput["lerobot_ros_run_directory"] = str(workers.run_directory())


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadgroup`` (scripts/run_tests.sh) as it is meant: see support/workers.py."""
    if config.getvalue("dist") == "loadgroup":
        return workers.module_group_scheduler(config, log)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    node.config.lerobot_ros_block_of.pop(node.gateway.id, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """In a worker, a ``serial`` test runs while no other worker runs one."""
    if not workers.in_worker():
        return (yield)
    serial = item.get_closest_marker("serial") is not None
    workers.before_test(serial, item.session.lerobot_ros_serial_collected)
    try:
        return (yield)
    finally:
        workers.after_test(serial, nextitem is not None and nextitem.get_closest_marker("serial"))


def pytest_collection_finish(session) -> None:
    """Start the slow set-ups the collected tests need (support/background.py), so they overlap the
    others. A worker collects every test but runs only some: there, the fixtures start their own
    set-ups when a test asks, while the other workers go on."""
    from support import background

    if workers.in_worker():
        session.lerobot_ros_serial_collected = any(
            item.get_closest_marker("serial") for item in session.items
        )
        return
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
    workers.end_run()


@pytest.fixture(scope="session")
def act_checkpoint() -> Path:
    """A real ACT checkpoint for the simulated 6-joint arm, random weights."""
    from lerobot_ros.sim.default_policy import build_act_checkpoint

    return workers.built_once("act_so101", build_act_checkpoint)


@pytest.fixture(scope="session")
def smolvla_checkpoint() -> Path:
    """A tiny RTC-capable SmolVLA checkpoint for the same arm, random weights, built offline."""
    from lerobot_ros.sim.default_policy import build_smolvla_checkpoint

    return workers.built_once("smolvla_so101", build_smolvla_checkpoint)


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
def diffusion_checkpoint() -> Path:
    """A small random Diffusion checkpoint; 100 denoising steps make each request take ~0.5-1 s
    here."""
    from support.policies import build_diffusion_checkpoint

    return workers.built_once(
        "diffusion", lambda directory: build_diffusion_checkpoint(directory, inference_steps=100)
    )


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
