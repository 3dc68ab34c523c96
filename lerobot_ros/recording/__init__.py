"""Recording episodes as LeRobot datasets, training on them and evaluating the result through the ROS loop."""
