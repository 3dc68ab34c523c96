"""What every lerobot_ros node's ROS shell shares: its parameter table and its main loop.

``parameters`` is the plain-Python table (no rclpy); ``node_support`` declares
it on a node and runs the node (signals, drain, lifecycle autostart). Beside
the protocol layer at the bottom: used by every node, it imports no side.
"""
