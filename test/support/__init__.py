"""Helpers the tests share: paths, bounded ROS waits, real server and executor
processes, a scripted robot client, extra checkpoints, reliability figures.

Test modules import from here, never from each other; conftest.py only turns
some of these into fixtures.
"""
