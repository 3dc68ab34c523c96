"""The simulated arm's hardware facts: an SO-100/SO-101 style six-joint arm.

Invariant: one definition of the arm — its joint names and order, joint
limits, home pose and camera — that the simulator, the default policies
(whose action space and statistics must match it) and the demo wiring all
read. Plain constants, no imports: the launch plan reads them on machines
without the simulator's dependencies.
"""

SO101_JOINT_NAMES = (
    "shoulder_pan",
    "shoulder_lift",
    "elbow_flex",
    "wrist_flex",
    "wrist_roll",
    "gripper",
)
#: Joint position limits (radians), in joint order.
JOINT_LOWER_LIMITS = (-2.0, -1.8, -0.2, -1.8, -2.8, 0.0)
JOINT_UPPER_LIMITS = (2.0, 1.0, 2.6, 1.8, 2.8, 1.2)
#: Where the joints start (radians); the default policies' statistics centre on it.
HOME_POSE = (0.0, -0.5, 0.8, 0.3, 0.0, 0.2)
#: The camera's policy feature name.
FRONT_CAMERA = "observation.images.front"
DEFAULT_IMAGE_SHAPE = (96, 128)  # (height, width): small, so a CPU answers in tens of ms
