"""GPU side: policy_server_node and the plain-Python logic it adapts.

Everything under this package may import torch and LeRobot; nothing on the
robot side (lerobot_ros.executor) may import from here.
"""
