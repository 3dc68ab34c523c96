"""The whole loop on one machine: policy server + simulated arm + executor.

    ros2 launch lerobot_ros demo.launch.py
    ros2 launch lerobot_ros demo.launch.py checkpoint:=/path/to/act output_mode:=joint_trajectory
    ros2 launch lerobot_ros demo.launch.py policy:=act   # a random-weight ACT, not the SmolVLA
    ros2 launch lerobot_ros demo.launch.py rviz:=true   # and watch the arm in rviz2

Without a checkpoint it serves the trained reach SmolVLA committed with the package (it does
real-time chunking), or with policy:=act / policy:=smolvla a random-weight policy matched to the
simulated arm, built once. Uses rmw_zenoh and starts its router by default. The wiring lives in
lerobot_ros.launch_plan.demo_plan.
"""

from lerobot_ros.launch_actions import launch_description
from lerobot_ros.launch_plan import ZENOH_RMW, demo_plan, parse_flag
from lerobot_ros.policy_names import checkpoint_or_default
from lerobot_ros.protocol.wire import output_modes

ARGUMENTS = {
    "checkpoint": ("", "LeRobot checkpoint; empty for the default policy (see policy)"),
    "policy": (
        "trained_smolvla",
        "Default policy when checkpoint is empty: trained_smolvla (the trained reach "
        "SmolVLA committed with the package, RTC), act or smolvla (random weights)",
    ),
    "output_mode": (output_modes.DEFAULT_OUTPUT_MODE, output_modes.choices_text()),
    "device": ("auto", "auto, cpu, cuda or cuda:N"),
    "rmw_implementation": (ZENOH_RMW, "ROS 2 middleware; empty keeps the environment's"),
    "start_router": ("true", "Start the rmw_zenoh router (only with rmw_zenoh_cpp)"),
    "rviz": (
        "false",
        "Also open rviz2 on the simulated arm where rviz2 is installed (else a log line says it "
        "is not)",
    ),
}


def _plan(value: dict[str, str]):
    return demo_plan(
        checkpoint_or_default(value["checkpoint"], value["policy"]),
        output_mode=value["output_mode"],
        device=value["device"],
        rmw_implementation=value["rmw_implementation"],
        start_zenoh_router=parse_flag("start_router", value["start_router"])
        and value["rmw_implementation"] == ZENOH_RMW,
        rviz=parse_flag("rviz", value["rviz"]),
    )


def generate_launch_description():
    return launch_description(ARGUMENTS, _plan)
