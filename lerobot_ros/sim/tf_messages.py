"""The sim arm's transforms as tf2 messages, and whether tf2_msgs is there to carry them.

Invariant: the sim never needs ``tf2_msgs`` to run. It is an interface
package of every ROS install, but the ROS 2 wheels do not ship it (here it
is built from the vendored sources by ``scripts/setup_env.sh``); without it
``tf_message_type`` says why and the node publishes no ``/tf``. Plain
message building, no rclpy.
"""

from __future__ import annotations

from geometry_msgs.msg import TransformStamped

from lerobot_ros.sim.description import Transform


def tf_message_type():
    """(tf2_msgs.msg.TFMessage, "") or (None, why it cannot be imported)."""
    try:
        from tf2_msgs.msg import TFMessage
    except ImportError as error:
        return None, (
            f"no /tf or /tf_static: tf2_msgs cannot be imported ({error}); "
            "install a ROS 2 tf2_msgs or build it into the venv (scripts/setup_env.sh)"
        )
    return TFMessage, ""


def tf_message(message_type, transforms: list[Transform], stamp):
    """One ``message_type`` (TFMessage) holding ``transforms``, all stamped ``stamp``."""
    message = message_type()
    for transform in transforms:
        stamped = TransformStamped()
        stamped.header.stamp = stamp
        stamped.header.frame_id = transform.parent
        stamped.child_frame_id = transform.child
        translation, rotation = stamped.transform.translation, stamped.transform.rotation
        translation.x, translation.y, translation.z = (
            float(value) for value in transform.translation
        )
        rotation.x, rotation.y, rotation.z, rotation.w = (
            float(value) for value in transform.rotation
        )
        message.transforms.append(stamped)
    return message
