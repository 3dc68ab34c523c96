"""Starting nodes as child processes: the command line they get."""

from lerobot_ros.processes import ros_args


def test_ros_args_quote_values_and_rename_the_node():
    assert ros_args({"joint_names": ["a", "b"], "fps": 30.0, "checkpoint": "/x y"}, node_name="srv2") == [
        "--ros-args", "-r", "__node:=srv2",
        "-p", 'joint_names:=["a", "b"]', "-p", "fps:=30.0", "-p", 'checkpoint:="/x y"',
    ]
