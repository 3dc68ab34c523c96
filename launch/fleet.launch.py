"""A small fleet on one machine: policy server replicas + simulated arms, each robot listing every
replica.

    ros2 launch lerobot_ros fleet.launch.py
    ros2 launch lerobot_ros fleet.launch.py servers:=3 robots:=4 checkpoint:=/path/to/act
    ros2 launch lerobot_ros fleet.launch.py discovery:=true

Replicas run as /gpu<i>/lerobot, robots as /sim_arm_<j>; every executor's server_namespaces names
all replicas (with discovery:=true it is ["auto"] and each executor finds them on the ROS graph:
launch_plan.discovery_entry), so stopping one replica (Ctrl-C in its terminal, or kill) moves its
robots to the others. On real hardware run one server.launch.py per GPU instead (namespace:=gpu<i>
device:=cuda:<i>). The wiring lives in lerobot_ros.launch_plan.fleet_plan.
"""

from lerobot_ros.launch_actions import launch_description
from lerobot_ros.launch_plan import ZENOH_RMW, fleet_plan, parse_flag
from lerobot_ros.policy_names import checkpoint_or_default
from lerobot_ros.protocol.wire import output_modes

ARGUMENTS = {
    "checkpoint": ("", "LeRobot checkpoint; empty for the default policy (random weights)"),
    "policy": (
        "act",
        "Default policy when checkpoint is empty: act or smolvla (random weights; smolvla is "
        "RTC-capable) or trained_smolvla (the trained reach SmolVLA committed with the package)",
    ),
    "servers": ("2", "Policy server replicas"),
    "robots": ("3", "Simulated arms"),
    "output_mode": (output_modes.DEFAULT_OUTPUT_MODE, output_modes.choices_text()),
    "device": ("auto", "auto, cpu, cuda or cuda:N (every replica on this machine uses it)"),
    "rmw_implementation": (ZENOH_RMW, "ROS 2 middleware; empty keeps the environment's"),
    "start_router": ("true", "Start the rmw_zenoh router (only with rmw_zenoh_cpp)"),
    "discovery": (
        "false",
        "true: each robot finds the replicas on the ROS graph (server_namespaces [auto]) "
        "instead of listing them",
    ),
}


def _plan(value: dict[str, str]):
    return fleet_plan(
        checkpoint_or_default(value["checkpoint"], value["policy"]),
        servers=int(value["servers"]),
        robots=int(value["robots"]),
        output_mode=value["output_mode"],
        device=value["device"],
        rmw_implementation=value["rmw_implementation"],
        start_zenoh_router=parse_flag("start_router", value["start_router"])
        and value["rmw_implementation"] == ZENOH_RMW,
        discovery=parse_flag("discovery", value["discovery"]),
    )


def generate_launch_description():
    return launch_description(ARGUMENTS, _plan)
