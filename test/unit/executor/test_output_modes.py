"""The command message each output mode publishes, as the executor builds it (wire/output_modes.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from lerobot_ros.wire.output_modes import output_mode
from support.executor_harness import JOINTS


def test_output_messages_carry_joint_names_and_values_in_order():
    action = np.array([0.1, 0.2, 0.3])
    forward = output_mode("forward_command").build(JOINTS, action, 1 / 30)
    assert isinstance(forward, Float64MultiArray) and list(forward.data) == pytest.approx([0.1, 0.2, 0.3])
    assert forward.layout.dim[0].size == 3
    trajectory = output_mode("joint_trajectory").build(JOINTS, action, 0.02)
    assert isinstance(trajectory, JointTrajectory) and list(trajectory.joint_names) == list(JOINTS)
    assert len(trajectory.points) == 1 and list(trajectory.points[0].positions) == pytest.approx([0.1, 0.2, 0.3])
    assert (trajectory.points[0].time_from_start.sec, trajectory.points[0].time_from_start.nanosec) == (0, 20_000_000)
    state = output_mode("joint_state").build(JOINTS, action, 0.02)
    assert isinstance(state, JointState) and list(state.name) == list(JOINTS)
    assert list(state.position) == pytest.approx([0.1, 0.2, 0.3])
    with pytest.raises(ValueError, match="2 values for 3 joints"):
        output_mode("joint_state").build(JOINTS, action[:2], 0.02)
