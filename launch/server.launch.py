"""Start policy_server_node on the GPU machine.

    ros2 launch lerobot_ros server.launch.py checkpoint:=/path/to/checkpoint
    ros2 launch lerobot_ros server.launch.py checkpoint:=lerobot/act_aloha start_router:=true \\
        device:=cuda

Uses rmw_zenoh by default (rmw_implementation:=rmw_fastrtps_cpp for DDS);
start_router:=true also starts rmw_zenohd, with router_config if given
(e.g. the shipped config/zenoh/router_server.json5). The wiring lives in
lerobot_ros.launch_plan.server_plan.
"""

from lerobot_ros.launch_actions import launch_description
from lerobot_ros.launch_plan import ZENOH_RMW, parse_flag, server_plan, share_path

ARGUMENTS = {
    "checkpoint": ("", "LeRobot checkpoint directory or Hugging Face Hub id (required)"),
    "namespace": (
        "",
        "Namespace for the server node (its entities live under <namespace>/lerobot)",
    ),
    "device": ("auto", "auto, cpu, cuda or cuda:N"),
    "params_file": (share_path("config", "server.yaml"), "Parameter file"),
    "rmw_implementation": (ZENOH_RMW, "ROS 2 middleware; empty keeps the environment's"),
    "start_router": ("false", "Also start the rmw_zenoh router (rmw_zenohd)"),
    "router_config": (
        "",
        "Zenoh router config file for rmw_zenohd; empty for rmw_zenoh's default",
    ),
}


def _plan(value: dict[str, str]):
    return server_plan(
        value["checkpoint"],
        namespace=value["namespace"],
        device=value["device"],
        params_file=value["params_file"],
        rmw_implementation=value["rmw_implementation"],
        start_zenoh_router=parse_flag("start_router", value["start_router"]),
        zenoh_router_config=value["router_config"],
    )


def generate_launch_description():
    return launch_description(ARGUMENTS, _plan)
