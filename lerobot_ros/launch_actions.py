"""Turn a launch_plan.Plan into ROS 2 launch actions (used by launch/*.launch.py).

Needs the ``launch`` and ``launch_ros`` packages (a ROS 2 install, or the
vendored tools that scripts/setup_env.sh installs), so this module is only
imported by ``ros2 launch``.

Invariant: a translation, never a decision: every node, parameter,
remapping, environment variable and stop timeout comes from the plan
unchanged, so what ``ros2 launch`` runs is what ``launch_plan`` (tested
everywhere) says and what the demo commands run as processes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from launch.actions import (
    DeclareLaunchArgument,
    ExecuteProcess,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
)
from launch.event_handlers import OnProcessExit
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription
from lerobot_ros.launch_plan import Plan, exit_problem, rmw_problem


def launch_description(
    arguments: Mapping[str, tuple[str, str]], plan_of: Callable[[dict[str, str]], Plan]
) -> LaunchDescription:
    """A launch file's whole description: ``arguments`` maps each launch argument to (default,
    description); ``plan_of`` gets every argument's value, as text, and returns the plan to run."""

    def run(context) -> list:
        plan = plan_of({name: LaunchConfiguration(name).perform(context) for name in arguments})
        problem = rmw_problem(plan)
        # before any node starts: an exception makes `ros2 launch` exit non-zero with it
        if problem:
            raise RuntimeError(problem)
        return actions_of(plan)

    declared = [
        DeclareLaunchArgument(name, default_value=default, description=text)
        for name, (default, text) in arguments.items()
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=run)])


def actions_of(plan: Plan) -> list:
    actions: list = [
        SetEnvironmentVariable(name, value) for name, value in plan.environment.items()
    ]
    actions += [LogInfo(msg=notice) for notice in plan.notices]
    if plan.start_zenoh_router:
        router_env = (
            {"ZENOH_ROUTER_CONFIG_URI": plan.zenoh_router_config}
            if plan.zenoh_router_config
            else {}
        )
        actions.append(
            ExecuteProcess(
                cmd=["ros2", "run", "rmw_zenoh_cpp", "rmw_zenohd"],
                additional_env=router_env,
                output="screen",
            )
        )
    for node in plan.nodes:
        launched = Node(
            package=node.package,
            executable=node.executable,
            arguments=list(node.arguments),
            name=node.name,
            namespace=node.namespace,
            parameters=[*node.parameter_files, dict(node.parameters)],
            remappings=list(node.remappings),
            output="screen",
            emulate_tty=True,
            sigterm_timeout=str(node.stop_timeout_s),
        )
        actions += [
            launched,
            RegisterEventHandler(OnProcessExit(target_action=launched, on_exit=_failed_exit)),
        ]
    return actions


def _failed_exit(event, context) -> None:
    """A node that exits with an error fails the launch (ROS's launch would return 0 after it)."""
    problem = exit_problem(event.action.name, event.returncode)
    if problem:
        raise RuntimeError(problem)
