"""A small fleet on one machine: policy server replicas + simulated arms, each robot listing every replica.

    ros2 launch lerobot_ros fleet.launch.py
    ros2 launch lerobot_ros fleet.launch.py servers:=3 robots:=4 checkpoint:=/path/to/act

Replicas run as /gpu<i>/lerobot, robots as /sim_arm_<j>; every executor's
server_namespaces names all replicas, so stopping one replica (Ctrl-C in its
terminal, or kill) moves its robots to the others. On real hardware run one
server.launch.py per GPU instead (namespace:=gpu<i> device:=cuda:<i>). The
wiring lives in lerobot_ros.launch_plan.fleet_plan.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, OpaqueFunction
from launch.substitutions import LaunchConfiguration

from lerobot_ros import output_modes
from lerobot_ros.launch_actions import actions_of
from lerobot_ros.launch_plan import ZENOH_RMW, fleet_plan

ARGUMENTS = {
    "checkpoint": ("", "LeRobot checkpoint; empty for the default policy (random weights)"),
    "policy": ("act", "Default policy when checkpoint is empty: act or smolvla (RTC-capable)"),
    "servers": ("2", "Policy server replicas"),
    "robots": ("3", "Simulated arms"),
    "output_mode": (output_modes.DEFAULT_OUTPUT_MODE, output_modes.choices_text()),
    "device": ("auto", "auto, cpu, cuda or cuda:N (every replica on this machine uses it)"),
    "rmw_implementation": (ZENOH_RMW, "ROS 2 middleware; empty keeps the environment's"),
    "start_router": ("true", "Start the rmw_zenoh router (only with rmw_zenoh_cpp)"),
}


def _plan(context):
    value = {name: LaunchConfiguration(name).perform(context) for name in ARGUMENTS}
    checkpoint = value["checkpoint"]
    if not checkpoint:
        from lerobot_ros.sim.default_policy import default_checkpoint

        checkpoint = str(default_checkpoint(value["policy"]))
    plan = fleet_plan(
        checkpoint,
        servers=int(value["servers"]),
        robots=int(value["robots"]),
        output_mode=value["output_mode"],
        device=value["device"],
        rmw_implementation=value["rmw_implementation"],
        start_zenoh_router=value["start_router"].lower() == "true" and value["rmw_implementation"] == ZENOH_RMW,
    )
    return actions_of(plan)


def generate_launch_description() -> LaunchDescription:
    return LaunchDescription(
        [DeclareLaunchArgument(name, default_value=default, description=text) for name, (default, text) in ARGUMENTS.items()]
        + [OpaqueFunction(function=_plan)]
    )
