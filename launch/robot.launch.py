"""Start chunk_executor_node on the robot computer (optionally with the simulated arm).

    ros2 launch lerobot_ros robot.launch.py params_file:=/path/to/my_robot.yaml \
        joint_states_topic:=/my_arm/joint_states command_topic:=/arm_controller/commands
    ros2 launch lerobot_ros robot.launch.py sim:=true

The parameter file names the robot's ordered joints, cameras and output
(see config/robot.yaml). camera_remaps is a comma-separated list of
from:=to pairs for the camera topics. An argument left empty
(server_namespace, output_mode, client_id) keeps the parameter file's value;
command_topic remaps the params file's output_topic (or its output mode's
default topic). Uses rmw_zenoh by default, like server.launch.py: where it
is not installed the launch stops before any node starts and says what to
pass instead (rmw_implementation:=rmw_fastrtps_cpp); a node that exits with
an error fails the launch (non-zero exit code). The wiring lives in
lerobot_ros.launch_plan.robot_plan.
"""

from lerobot_ros.launch_actions import launch_description
from lerobot_ros.launch_plan import ZENOH_RMW, parse_flag, parse_remaps, robot_plan, share_path
from lerobot_ros.protocol.wire import output_modes

ARGUMENTS = {
    "robot_namespace": ("", "Namespace of this robot"),
    "server_namespace": (
        "",
        "Where the policy server answers; empty keeps the params file's (/lerobot by default)",
    ),
    "client_id": ("", "Stable id of this robot (empty: derived from the host name and namespace)"),
    "output_mode": ("", output_modes.choices_text() + "; empty keeps the params file's"),
    "params_file": (share_path("config", "robot.yaml"), "Parameter file"),
    "camera_remaps": ("", "Camera topic remaps, e.g. camera/front/image_raw:=/usb_cam/image_raw"),
    "joint_states_topic": ("", "Remap the joint state input to this topic"),
    "command_topic": ("", "Remap the command output to this topic"),
    "sim": ("false", "Also start sim_robot_node and wire the executor to it"),
    "rmw_implementation": (ZENOH_RMW, "ROS 2 middleware; empty keeps the environment's"),
    "zenoh_session_config": (
        "",
        "rmw_zenoh session config file (ZENOH_SESSION_CONFIG_URI): the router's address, "
        "certificates, ACL; empty: rmw_zenoh's default (a router on localhost)",
    ),
    "zenoh_router": (
        "",
        "Router to connect to, e.g. tcp/192.168.1.10:7447 (ZENOH_CONFIG_OVERRIDE); empty: the "
        "config's",
    ),
    "allow_no_joint_limits": (
        "false",
        "Let a real robot (no sim) run without joint limits; default: it refuses to "
        "configure unless its params file or robot_description gives limits",
    ),
    "rviz": (
        "false",
        "With sim:=true, also open rviz2 on the simulated arm where rviz2 is installed (else a "
        "log line says it is not)",
    ),
}


def _plan(value: dict[str, str]):
    return robot_plan(
        robot_namespace=value["robot_namespace"],
        server_namespace=value["server_namespace"],
        client_id=value["client_id"],
        output_mode=value["output_mode"],
        params_file=value["params_file"],
        camera_remaps=parse_remaps(value["camera_remaps"]),
        joint_states_topic=value["joint_states_topic"],
        command_topic=value["command_topic"],
        sim=parse_flag("sim", value["sim"]),
        rmw_implementation=value["rmw_implementation"],
        rviz=parse_flag("rviz", value["rviz"]),
        zenoh_session_config=value["zenoh_session_config"],
        zenoh_router=value["zenoh_router"],
        allow_no_joint_limits=parse_flag("allow_no_joint_limits", value["allow_no_joint_limits"]),
    )


def generate_launch_description():
    return launch_description(ARGUMENTS, _plan)
