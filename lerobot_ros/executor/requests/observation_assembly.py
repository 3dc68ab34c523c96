"""The latest-only sensor holders, and the observation assembled from them, gated by age.

Invariants:

* latest only: subscription callbacks overwrite one slot per source, so an
  observation is always built from the newest data and nothing queues up;
* joint-state messages are mapped by joint NAME, never by index (drivers
  publish joints in whatever order they like; columns map to motors by
  the policy's order);
* cheap until needed: a source can be pulled instead of pushed
  (``pull_from``): its newest sample is taken (and so deserialized) from the
  middleware only when a reader needs it (``assemble``, i.e. when a request
  is built, or the measured position a hold uses), so frames and joint
  states that a newer one replaces before then cost this process nothing. A
  pulled sample keeps the time the middleware received it, so pulling late
  never makes old data look fresh;
* an observation whose joint state or any camera frame is older than
  ``max_observation_age_s`` (or missing) is not sent: the policy would plan
  from a world that no longer exists. Ages are receive times on the
  executor's monotonic clock; header stamps come from other clocks.

Plain Python; what is assembled here becomes one ``OutgoingObservation`` in
``pending_request.py``, and ``lerobot_ros.protocol.wire.data_plane`` makes the message.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

T = TypeVar("T")

#: A pulled source: its newest sample not returned before, with its receive time
#: (executor's monotonic clock), or None when nothing newer arrived.
Pull = Callable[[], "tuple[Any, float] | None"]


class Latest(Generic[T]):
    """One latest-only slot: the newest value and when it was received."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: T | None = None
        self._received_s: float | None = None

    def put(self, value: T, received_s: float) -> None:
        with self._lock:
            self._value, self._received_s = value, received_s

    def get(self) -> tuple[T | None, float | None]:
        with self._lock:
            return self._value, self._received_s


@dataclass(frozen=True)
class JointSample:
    """Joint positions (and velocities) in the robot's joint order."""

    positions: np.ndarray
    velocities: np.ndarray | None


class JointStateError(ValueError):
    """A JointState message that cannot give this robot's joints."""


def map_joint_state(joint_names: tuple[str, ...], names, positions, velocities=()) -> JointSample:
    """Reorder a JointState's fields into ``joint_names`` order, by name.

    Extra joints in the message are ignored; a missing joint, or position
    and name lists of different lengths, is a JointStateError. Velocities are
    None when the message carries none (an empty list is allowed by the
    message definition).
    """
    names = list(names)
    if len(positions) != len(names):
        raise JointStateError(f"JointState has {len(names)} names but {len(positions)} positions")
    index = {name: i for i, name in enumerate(names)}
    missing = [name for name in joint_names if name not in index]
    if missing:
        raise JointStateError(f"JointState lacks joints {missing}; it names {names}")
    order = [index[name] for name in joint_names]
    mapped_positions = np.asarray(positions, dtype=np.float64)[order]
    mapped_velocities = None
    if len(velocities) == len(names) and len(names):
        mapped_velocities = np.asarray(velocities, dtype=np.float64)[order]
    return JointSample(mapped_positions, mapped_velocities)


def state_vector(sample: JointSample, include_velocity: bool) -> np.ndarray:
    """The state the policy receives: positions, then velocities when asked for."""
    if not include_velocity:
        return sample.positions.astype(np.float32)
    if sample.velocities is None:
        raise JointStateError(
            "state_include_velocity is on but the JointState carries no velocities"
        )
    return np.concatenate([sample.positions, sample.velocities]).astype(np.float32)


@dataclass(frozen=True)
class AssembledObservation:
    """Everything an Observation carries besides the request ids and RTC fields."""

    state: np.ndarray
    cameras: dict  # camera name -> the newest Image or CompressedImage message
    oldest_age_s: float


@dataclass(frozen=True)
class NotSent:
    """Why no observation can be sent now; ``too_old`` counts in telemetry."""

    reason: str
    too_old: bool = False


def _pull_newest(
    pull: Pull | None, lock: threading.Lock, store: Callable[[Any, float], None]
) -> str:
    """Take the newest sample of ``pull`` and store it; why it could not be taken, or ""."""
    if pull is None:
        return ""
    # Take and store as one step: two readers must never store an older sample over a newer one.
    with lock:
        try:
            newest = pull()
        except Exception as error:  # noqa: BLE001 - bytes the middleware holds that their own type cannot read
            return f"{type(error).__name__}: {error}"
        if newest is not None:
            store(*newest)
        return ""


class ObservationAssembler:
    """Latest-only holders for one robot's joint state and cameras."""

    def __init__(
        self,
        joint_names: tuple[str, ...],
        camera_names: tuple[str, ...],
        include_velocity: bool,
        max_age_s: float,
    ) -> None:
        self.joint_names = tuple(joint_names)
        self.include_velocity = include_velocity
        self.max_age_s = max_age_s
        self.joints: Latest[JointSample] = Latest()
        self.cameras: dict[str, Latest] = {name: Latest() for name in camera_names}
        self.joint_state_errors = 0
        self.last_joint_state_error = ""
        self._joint_pull: Pull | None = None
        self._camera_pulls: dict[str, Pull] = {}
        self._joint_pull_lock = threading.Lock()
        self._camera_pull_locks = {name: threading.Lock() for name in camera_names}

    def pull_from(
        self, joint_state: Pull | None = None, cameras: dict[str, Pull] | None = None
    ) -> None:
        """Read these sources when their values are needed instead of being pushed.

        ``joint_state`` returns a JointState-like message (``name``,
        ``position``, ``velocity``) and ``cameras`` an Image or
        CompressedImage, each with its receive time.
        """
        unknown = sorted(set(cameras or {}) - set(self.cameras))
        if unknown:
            raise ValueError(
                f"no such cameras {unknown}; this robot's cameras are {sorted(self.cameras)}"
            )
        if joint_state is not None:
            self._joint_pull = joint_state
        self._camera_pulls.update(cameras or {})

    def _refresh_joints(self) -> str:
        return _pull_newest(
            self._joint_pull,
            self._joint_pull_lock,
            lambda msg, received: self.on_joint_state(
                msg.name, msg.position, msg.velocity, received
            ),
        )

    def _refresh_camera(self, name: str) -> str:
        return _pull_newest(
            self._camera_pulls.get(name),
            self._camera_pull_locks[name],
            lambda frame, received: self.on_camera(name, frame, received),
        )

    # Pushed values (subscription callbacks, tests) ------------------------------

    def on_joint_state(self, names, positions, velocities, now_s: float) -> None:
        try:
            self.joints.put(map_joint_state(self.joint_names, names, positions, velocities), now_s)
        except JointStateError as error:
            self.joint_state_errors += 1
            self.last_joint_state_error = str(error)

    def on_camera(self, name: str, msg, now_s: float) -> None:
        """``msg``: an Image or CompressedImage."""
        self.cameras[name].put(msg, now_s)

    # Readers ----------------------------------------------------------------

    def measured_positions(self) -> np.ndarray | None:
        """The newest measured joint positions (any age), for hold and the safety reference."""
        self._refresh_joints()
        sample, _ = self.joints.get()
        return None if sample is None else sample.positions

    def assemble(
        self, now_s: float, cameras: frozenset[str] | None = None
    ) -> AssembledObservation | NotSent:
        """The latest joint state and frames, fresh; ``cameras``: only these (None: all)."""
        unreadable = self._refresh_joints()
        if unreadable:
            return NotSent(f"the joint state could not be read: {unreadable}")
        sample, joints_at = self.joints.get()
        if sample is None:
            why = (
                f" (last error: {self.last_joint_state_error})"
                if self.last_joint_state_error
                else ""
            )
            return NotSent("no joint state received yet" + why)
        ages = {"joint state": now_s - joints_at}
        frames = {}
        for name, holder in self.cameras.items():
            if cameras is not None and name not in cameras:
                continue  # a camera the policy does not read costs nothing, not even a take
            unreadable = self._refresh_camera(name)
            if unreadable:
                return NotSent(f"camera {name!r}'s frame could not be read: {unreadable}")
            frame, received = holder.get()
            if frame is None:
                return NotSent(f"camera {name!r} has not published a frame yet")
            frames[name] = frame
            ages[f"camera {name!r}"] = now_s - received
        stale = {source: age for source, age in ages.items() if age > self.max_age_s}
        if stale:
            detail = ", ".join(f"{source} {age:.3f} s" for source, age in stale.items())
            return NotSent(
                f"sensor data older than max_observation_age_s {self.max_age_s}: {detail}",
                too_old=True,
            )
        try:
            state = state_vector(sample, self.include_velocity)
        except JointStateError as error:
            return NotSent(str(error))
        return AssembledObservation(state, frames, max(ages.values()))
