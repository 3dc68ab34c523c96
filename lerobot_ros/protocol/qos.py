"""QoS of every lerobot_ros topic, shared by both ends so they always match.

Data plane: reliable (rmw_zenoh maps it to a reliable channel; best effort
loses large observations under load, and a lost request costs a whole
request timeout), keep-last (observations: depth 1, the newest wins anyway;
chunks: a few, so a burst of answers to several requests is not cut),
volatile (transient local makes rmw_zenoh keep a publication cache that
would hand a restarted robot a stale chunk). rmw_zenoh implements neither
deadline nor lifespan, so staleness is checked in the application
(monotonic stamps, heartbeat, request timeouts), never through QoS.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

OBSERVATION_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
ACTION_CHUNK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=4,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
#: Heartbeats and telemetry are small and periodic: keep only the newest, but deliver it.
STATUS_QOS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
#: A status followed event by event (the recorder cutting episodes at an executor's goals): the
#: executor publishes a goal's start and end at once, between periodic ones, and each should be
#: read.
STATUS_FOLLOWER_QOS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
#: Robot sensors (joint states, cameras): best effort so it matches both
#: reliable and best-effort drivers (a reliable subscription would not match
#: a best-effort camera); depth 1 because only the newest sample is used.
SENSOR_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)
#: Commands to the robot's controllers: reliable (ros2_control controllers
#: subscribe with reliable defaults), keep-last 1: an older command is never
#: worth delivering after a newer one.
COMMAND_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
#: What a late subscriber must still get, published once (robot_description,
#: /tf_static): transient local, the newest only, as robot_state_publisher
#: and tf2's static broadcaster publish them.
LATCHED_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
#: /tf: tf2's broadcaster profile (reliable, volatile, keep the last 100).
TF_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=100,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)
