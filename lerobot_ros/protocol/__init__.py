"""The protocol layer: what both ends of lerobot_ros agree on, and nothing else.

The wire conversions (``wire/``), the robot-vs-policy contract, entity names,
QoS profiles, the request-trigger rule, the checkpoint layout, the status
enums and telemetry records. Invariant: every other part of the package may
import this layer, and it imports none of them (``.importlinter``, checked by
``test/unit/shared/test_layers.py``); it imports neither torch nor LeRobot, so
the robot side stays torch-free.
"""
