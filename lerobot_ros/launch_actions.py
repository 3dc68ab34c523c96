"""Turn a launch_plan.Plan into ROS 2 launch actions (used by launch/*.launch.py).

Needs the ``launch`` and ``launch_ros`` packages of a ROS 2 install (no
wheels exist for them, so this module is only imported by ``ros2 launch``);
all decisions live in ``launch_plan``, which is tested everywhere.
"""

from __future__ import annotations

from launch.actions import ExecuteProcess, LogInfo, SetEnvironmentVariable
from launch_ros.actions import Node

from lerobot_ros.launch_plan import Plan


def actions_of(plan: Plan) -> list:
    actions: list = [SetEnvironmentVariable(name, value) for name, value in plan.environment.items()]
    actions += [LogInfo(msg=notice) for notice in plan.notices]
    if plan.start_zenoh_router:
        router_env = {"ZENOH_ROUTER_CONFIG_URI": plan.zenoh_router_config} if plan.zenoh_router_config else {}
        actions.append(
            ExecuteProcess(cmd=["ros2", "run", "rmw_zenoh_cpp", "rmw_zenohd"], additional_env=router_env, output="screen")
        )
    for node in plan.nodes:
        actions.append(
            Node(
                package=node.package,
                executable=node.executable,
                arguments=list(node.arguments),
                name=node.name,
                namespace=node.namespace,
                parameters=[*node.parameter_files, dict(node.parameters)],
                remappings=list(node.remappings),
                output="screen",
                emulate_tty=True,
            )
        )
    return actions
