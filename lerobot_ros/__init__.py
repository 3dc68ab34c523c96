"""lerobot_ros: serve LeRobot policies to ROS 2 robots.

Layout: ``server`` (GPU side, needs torch and LeRobot), ``executor`` (robot
side, torch-free), ``wire`` (the one place that converts between ROS messages
and plain Python/numpy), ``contract`` (what a robot must match to be served).
The generated interfaces live in ``lerobot_ros.msg`` and ``lerobot_ros.srv``.
"""

# The generated interfaces may be installed in a different directory than this
# source package (a venv build installs them into site-packages while the
# package itself is an editable checkout). Extending __path__ makes both halves
# one package; on a colcon install they already share a directory and this is
# a no-op.
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)

__version__ = "0.1.0"
