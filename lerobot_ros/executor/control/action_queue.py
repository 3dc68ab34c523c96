"""The executor's local queue of actions, in model space and robot space.

Invariant: the robot executes each action of a chunk at most once, in order,
and an RTC merge never skips an action the robot has not executed. The two
buffers (model space for the next RTC prefix, robot space for publishing)
always hold the same rows, so the prefix sent to the server is exactly what
the robot still has to play.

This is a numpy port of LeRobot's ``lerobot.policies.rtc.action_queue.ActionQueue``
(same semantics, no torch) so that it runs on the small robot computer.
"""

from __future__ import annotations

import math
import threading
from typing import NamedTuple

import numpy as np


class QueueSnapshot(NamedTuple):
    """What the network worker sends with a request, read under one lock.

    ``left_over_model``/``left_over_robot`` are None before the first merge.
    """

    action_index: int
    left_over_model: np.ndarray | None
    left_over_robot: np.ndarray | None


class ActionQueue:
    """Thread-safe queue of action chunks (control loop pops, network worker merges).

    Two merge modes, as in LeRobot:

    * append (``rtc_enabled=False``): drop the consumed rows, append the new
      chunk after the unexecuted ones, reset the read index;
    * replace (``rtc_enabled=True``): the new chunk replaces the queue, minus
      its first ``delay`` rows, which cover the time the robot spent executing
      the old chunk while the server was inferring.

    Deliberate differences from LeRobot:

    (a) In replace mode the trimmed delay is clamped to the actions actually
        consumed since ``action_index_before_inference``:
        ``min(max(0, real_delay), consumed)``. LeRobot logs a warning and trims
        ``real_delay`` anyway; when the queue ran dry during inference the
        robot consumed fewer actions than the latency suggests, and trimming
        ``real_delay`` would skip actions the robot never executed. Without
        ``action_index_before_inference`` the delay is ``max(0, real_delay)``.
        Either way it is clamped to the chunk length. Note that ``clear()``
        resets the read index, so a chunk merged after a clear counts zero
        consumed actions and is played from its first row.
    (b) Shapes are validated: both arrays 2-D, same shape, at least one row,
        and ``action_dim`` equal to this queue's. The dimension is the robot's,
        so it is kept across ``clear()``.

    Additions: per-row source-observation time (``merge(..., source_time_s=)``
    and ``next_action_age_s``) so the control loop can refuse stale actions,
    ``snapshot`` for an atomic (index, prefixes) read capped to an execution
    horizon, ``queued_time_s``, and ``peek`` (the interpolating control loop
    reads the rows it moves toward before their time comes).
    """

    def __init__(self, rtc_enabled: bool, action_dim: int | None = None) -> None:
        if action_dim is not None and action_dim < 1:
            raise ValueError(
                "action_dim must be >= 1 (or None to learn it from the first chunk), got "
                f"{action_dim}"
            )
        self._rtc_enabled = bool(rtc_enabled)
        self._action_dim = action_dim
        self._lock = threading.Lock()
        self._original: np.ndarray | None = None  # model space, [T, action_dim] float32
        self._processed: np.ndarray | None = None  # robot space, [T, action_dim] float32
        # Monotonic time (executor clock) of the observation each row was computed
        # from; NaN where the caller did not say. Rows follow the buffers above.
        self._source_time_s: np.ndarray | None = None
        self._index = 0

    # ----------------------------------------------------------------- reading

    @property
    def rtc_enabled(self) -> bool:
        return self._rtc_enabled

    @property
    def action_dim(self) -> int | None:
        """The robot's action dimension; None until given or learned from the first chunk."""
        with self._lock:
            return self._action_dim

    def get(self) -> np.ndarray | None:
        """Pop the next robot-space action (a copy), or None when nothing is left."""
        with self._lock:
            if self._processed is None or self._index >= len(self._processed):
                return None
            action = self._processed[self._index].copy()
            self._index += 1
            return action

    def peek(self, offset: int = 0) -> tuple[np.ndarray, float] | None:
        """The robot-space row ``offset`` places after the read index (a copy) and its source time
        (NaN: unknown), without popping; None when the queue holds no such row."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        with self._lock:
            if self._processed is None or self._index + offset >= len(self._processed):
                return None
            row = self._index + offset
            return self._processed[row].copy(), float(self._source_time_s[row])

    def qsize(self) -> int:
        with self._lock:
            return self._remaining()

    def empty(self) -> bool:
        with self._lock:
            return self._remaining() <= 0

    def get_action_index(self) -> int:
        with self._lock:
            return self._index

    def get_left_over(self) -> np.ndarray | None:
        """Unexecuted model-space rows (the RTC prefix), or None before the first merge."""
        with self._lock:
            return None if self._original is None else self._original[self._index :].copy()

    def get_processed_left_over(self) -> np.ndarray | None:
        """Unexecuted robot-space rows, or None before the first merge."""
        with self._lock:
            return None if self._processed is None else self._processed[self._index :].copy()

    def snapshot(self, max_steps: int | None = None) -> QueueSnapshot:
        """Read index and both left-overs under one lock acquisition.

        ``max_steps`` caps the left-overs to the policy's execution horizon
        (the prefix RTC may use); None keeps every unexecuted row.
        """
        if max_steps is not None and max_steps < 0:
            raise ValueError(f"max_steps must be >= 0 or None, got {max_steps}")
        with self._lock:
            end = None if max_steps is None else self._index + max_steps
            model = None if self._original is None else self._original[self._index : end].copy()
            robot = None if self._processed is None else self._processed[self._index : end].copy()
            return QueueSnapshot(self._index, model, robot)

    def queued_time_s(self, fps: float) -> float:
        """Playback time the unexecuted actions cover at ``fps`` actions per second."""
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"fps must be a finite number > 0, got {fps}")
        return self.qsize() / fps

    def next_action_age_s(self, now_s: float) -> float | None:
        """Age of the observation the next action was computed from.

        None when the queue is empty or the chunk was merged without
        ``source_time_s`` (the caller must then treat the action as stale).
        """
        with self._lock:
            if self._source_time_s is None or self._remaining() <= 0:
                return None
            source = float(self._source_time_s[self._index])
            return None if math.isnan(source) else now_s - source

    # ----------------------------------------------------------------- writing

    def clear(self) -> None:
        """Drop every queued action (e.g. stale ones) and reset the read index."""
        with self._lock:
            self._original = None
            self._processed = None
            self._source_time_s = None
            self._index = 0

    def merge(
        self,
        original_actions: np.ndarray,
        processed_actions: np.ndarray,
        real_delay: int,
        action_index_before_inference: int | None = None,
        source_time_s: float | None = None,
    ) -> int:
        """Merge a new chunk; returns how many leading rows were trimmed (0 in append mode).

        ``original_actions`` is the chunk in model space, ``processed_actions``
        the same chunk in robot space, both [T, action_dim]. ``real_delay`` is
        the inference delay in control steps; ``action_index_before_inference``
        the read index snapshotted when the request was sent.
        ``source_time_s`` is when that request's observation was taken (the
        executor's monotonic clock).
        """
        original, processed = self._validated(original_actions, processed_actions)
        source = np.full(
            len(original),
            np.nan if source_time_s is None else float(source_time_s),
            dtype=np.float64,
        )
        with self._lock:
            if self._action_dim is None:
                self._action_dim = original.shape[1]
            elif original.shape[1] != self._action_dim:
                raise ValueError(
                    f"chunk action_dim must equal the queue's action_dim {self._action_dim}, "
                    f"got {original.shape[1]} (chunk shape {original.shape})"
                )
            if self._rtc_enabled:
                return self._replace(
                    original, processed, source, real_delay, action_index_before_inference
                )
            self._append(original, processed, source)
            return 0

    # --------------------------------------------------------------- internals

    def _remaining(self) -> int:
        return 0 if self._processed is None else len(self._processed) - self._index

    @staticmethod
    def _validated(
        original_actions: np.ndarray, processed_actions: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        # np.array copies, so later changes to the caller's arrays never reach the queue.
        original = np.array(original_actions, dtype=np.float32)
        processed = np.array(processed_actions, dtype=np.float32)
        for name, array in (("original_actions", original), ("processed_actions", processed)):
            if array.ndim != 2:
                raise ValueError(f"{name} must be 2-D [T, action_dim], got shape {array.shape}")
            if array.shape[0] < 1 or array.shape[1] < 1:
                raise ValueError(
                    f"{name} must hold at least one action of dimension >= 1, got shape "
                    f"{array.shape}"
                )
        if original.shape != processed.shape:
            raise ValueError(
                f"original_actions and processed_actions must have the same shape, "
                f"got {original.shape} and {processed.shape}"
            )
        return original, processed

    def _replace(
        self,
        original: np.ndarray,
        processed: np.ndarray,
        source: np.ndarray,
        real_delay: int,
        action_index_before_inference: int | None,
    ) -> int:
        delay = max(0, int(real_delay))
        if action_index_before_inference is not None:
            # Fix (a): never trim more than the robot executed while the server inferred.
            consumed = max(0, self._index - action_index_before_inference)
            delay = min(delay, consumed)
        delay = min(delay, len(original))
        self._original = original[delay:]
        self._processed = processed[delay:]
        self._source_time_s = source[delay:]
        self._index = 0
        return delay

    def _append(self, original: np.ndarray, processed: np.ndarray, source: np.ndarray) -> None:
        if self._processed is None:
            self._original, self._processed, self._source_time_s = original, processed, source
            return
        # Same as LeRobot: concatenate, then drop what was already consumed.
        start = self._index
        self._original = np.concatenate([self._original[start:], original])
        self._processed = np.concatenate([self._processed[start:], processed])
        self._source_time_s = np.concatenate([self._source_time_s[start:], source])
        self._index = 0
