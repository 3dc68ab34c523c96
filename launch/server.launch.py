"""Start policy_server_node on the GPU machine.

    ros2 launch lerobot_ros server.launch.py checkpoint:=/path/to/checkpoint

Uses rmw_zenoh by default (start `ros2 run rmw_zenoh_cpp rmw_zenohd` first, or
pass rmw_implementation:=rmw_fastrtps_cpp for DDS).
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    default_params = PathJoinSubstitution([FindPackageShare("lerobot_ros"), "config", "server.yaml"])
    return LaunchDescription(
        [
            DeclareLaunchArgument("checkpoint", description="LeRobot checkpoint directory or Hub id"),
            DeclareLaunchArgument("device", default_value="auto", description="auto, cpu, cuda or cuda:N"),
            DeclareLaunchArgument("namespace", default_value="", description="Namespace for the server node"),
            DeclareLaunchArgument("params_file", default_value=default_params, description="Parameter file"),
            DeclareLaunchArgument("rmw_implementation", default_value="rmw_zenoh_cpp", description="ROS 2 middleware"),
            SetEnvironmentVariable("RMW_IMPLEMENTATION", LaunchConfiguration("rmw_implementation")),
            Node(
                package="lerobot_ros",
                executable="policy_server_node",
                name="lerobot",
                namespace=LaunchConfiguration("namespace"),
                output="screen",
                parameters=[
                    LaunchConfiguration("params_file"),
                    {"checkpoint": LaunchConfiguration("checkpoint"), "device": LaunchConfiguration("device")},
                ],
            ),
        ]
    )
