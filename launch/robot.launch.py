"""Start chunk_executor_node on the robot computer.

    ros2 launch lerobot_ros robot.launch.py params_file:=/path/to/my_robot.yaml

The parameter file names the robot's ordered joints (see config/robot.yaml).
Uses rmw_zenoh by default, like server.launch.py.
"""

from launch import LaunchDescription
from launch.actions import DeclareLaunchArgument, SetEnvironmentVariable
from launch.substitutions import LaunchConfiguration, PathJoinSubstitution
from launch_ros.actions import Node
from launch_ros.substitutions import FindPackageShare


def generate_launch_description() -> LaunchDescription:
    default_params = PathJoinSubstitution([FindPackageShare("lerobot_ros"), "config", "robot.yaml"])
    return LaunchDescription(
        [
            DeclareLaunchArgument("robot_namespace", default_value="", description="Namespace of this robot"),
            DeclareLaunchArgument("server_namespace", default_value="/lerobot", description="Policy server namespace"),
            DeclareLaunchArgument("params_file", default_value=default_params, description="Parameter file"),
            DeclareLaunchArgument("rmw_implementation", default_value="rmw_zenoh_cpp", description="ROS 2 middleware"),
            SetEnvironmentVariable("RMW_IMPLEMENTATION", LaunchConfiguration("rmw_implementation")),
            Node(
                package="lerobot_ros",
                executable="chunk_executor_node",
                name="chunk_executor",
                namespace=LaunchConfiguration("robot_namespace"),
                output="screen",
                parameters=[
                    LaunchConfiguration("params_file"),
                    {"server_namespace": LaunchConfiguration("server_namespace")},
                ],
            ),
        ]
    )
