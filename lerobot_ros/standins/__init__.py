"""Stand-ins for what a deployment provides around the nodes: a robot's driver, its cameras, a bare
command timer.

Each is a module with a ``main()``, run as its own process
(``python -m lerobot_ros.standins.<name> --help``), talking ROS 2 exactly as
the real thing would; the integration tests, the reliability suite and the
benchmarks start them, and a user can run them to try the executor on a
machine without a robot.

Invariant: every stand-in ends on its own after ``--run-s`` seconds (or on
SIGINT/SIGTERM) through ``bounded_spin.spin_then_exit``, so one can never
outlive the test or benchmark that started it, even when that process is
killed before it can stop it.
"""
