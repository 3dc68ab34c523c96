"""Recording episodes as LeRobot datasets, training on them and evaluating the result through the
ROS loop.

Invariant of the package: a trained policy reaches the demo only through
``trained_policy.install_trained_policy``, whole and with its evaluation.
"""
