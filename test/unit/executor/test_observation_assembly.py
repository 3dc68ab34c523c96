"""Latest-only sensor holders and the observation assembled from them (observation_assembly.py)."""

from __future__ import annotations

import numpy as np
import pytest
from sensor_msgs.msg import CompressedImage, Image

from lerobot_ros.executor.requests.observation_assembly import (
    JointStateError,
    NotSent,
    ObservationAssembler,
    map_joint_state,
)
from support.executor_harness import CAMERA, JOINTS


def test_joint_state_is_mapped_by_name_not_index():
    sample = map_joint_state(
        JOINTS, ["c", "extra", "a", "b"], [3.0, 9.0, 1.0, 2.0], [30.0, 90.0, 10.0, 20.0]
    )
    assert sample.positions.tolist() == [1.0, 2.0, 3.0]
    assert sample.velocities.tolist() == [10.0, 20.0, 30.0]
    assert map_joint_state(JOINTS, ["a", "b", "c"], [1, 2, 3], []).velocities is None
    with pytest.raises(JointStateError, match=r"lacks joints \['c'\]"):
        map_joint_state(JOINTS, ["a", "b"], [1.0, 2.0])
    with pytest.raises(JointStateError, match="3 names but 2 positions"):
        map_joint_state(JOINTS, ["a", "b", "c"], [1.0, 2.0])


def assembler(include_velocity=False, cameras=(CAMERA,)) -> ObservationAssembler:
    return ObservationAssembler(JOINTS, cameras, include_velocity, max_age_s=0.5)


def test_observation_uses_the_newest_samples_and_the_velocity_option():
    holder = assembler(include_velocity=True)
    holder.on_joint_state(["b", "a", "c"], [2.0, 1.0, 3.0], [0.2, 0.1, 0.3], now_s=10.0)
    holder.on_joint_state(["b", "a", "c"], [5.0, 4.0, 6.0], [0.5, 0.4, 0.6], now_s=10.1)
    frame = CompressedImage(format="jpeg")
    holder.on_camera(CAMERA, frame, now_s=10.2)
    observation = holder.assemble(now_s=10.3)
    assert observation.state.tolist() == pytest.approx([4.0, 5.0, 6.0, 0.4, 0.5, 0.6])
    assert observation.state.dtype == np.float32
    assert observation.cameras[CAMERA] is frame
    assert observation.oldest_age_s == pytest.approx(0.2)


def test_observation_is_not_sent_when_data_is_missing_or_too_old():
    holder = assembler()
    assert "no joint state" in holder.assemble(1.0).reason
    holder.on_joint_state(["a", "b", "c"], [1.0, 2.0, 3.0], [], now_s=1.0)
    missing = holder.assemble(1.1)
    assert (
        isinstance(missing, NotSent)
        and "has not published" in missing.reason
        and not missing.too_old
    )
    holder.on_camera(CAMERA, Image(), now_s=1.0)
    assert not isinstance(holder.assemble(1.4), NotSent)
    old = holder.assemble(1.6)
    assert (
        old.too_old
        and "joint state 0.600 s" in old.reason
        and "observation.images.front" in old.reason
    )
    velocity_holder = assembler(include_velocity=True, cameras=())
    velocity_holder.on_joint_state(["a", "b", "c"], [1.0, 2.0, 3.0], [], now_s=1.0)
    assert "no velocities" in velocity_holder.assemble(1.0).reason


def test_a_wrong_joint_state_is_counted_not_stored():
    holder = assembler(cameras=())
    holder.on_joint_state(["a"], [1.0], [], now_s=1.0)
    assert holder.joint_state_errors == 1
    assert "lacks joints" in holder.assemble(1.0).reason
