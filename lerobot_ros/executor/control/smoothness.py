"""How smoothly the robot moves across chunk boundaries, in robot units.

A boundary is where the executed actions switch from one chunk to the next:
in replace mode (RTC) right at the merge, to the first row kept after the
delay trim; in append mode once the rows still queued at the merge have
played out. The jump there is set against the ordinary step between
consecutive actions of one chunk. Both are the largest change over the
joints (L-infinity), so one joint snapping is not averaged away.

The prefix deviation is what real-time chunking acts on: while a request is
being inferred the robot keeps executing the old chunk; the new chunk's
first actions cover those same control steps. Their distance to the actions
actually executed (mean over those steps) says how well the new chunk
continues the motion: near zero with RTC guidance, the spread of the policy's
samples without it. It is meaningful for any policy, even one whose chunks
are rough (random weights), where boundary jumps look like ordinary steps.

Plain Python, no locking: the executor core calls it under its own lock.
"""

from __future__ import annotations

import numpy as np


def largest_joint_change(before: np.ndarray, after: np.ndarray) -> float:
    return float(
        np.max(np.abs(np.asarray(after, dtype=np.float64) - np.asarray(before, dtype=np.float64)))
    )


class SmoothnessTracker:
    def __init__(self) -> None:
        self.boundaries = 0
        self.jump_sum = 0.0
        self.jump_max = 0.0
        self.steps = 0
        self.step_sum = 0.0
        self.overlaps = 0
        self.deviation_sum = 0.0
        self.deviation_max = 0.0
        self._last_executed: np.ndarray | None = None
        self._rows_until_boundary: int | None = None  # None: no boundary ahead
        self._boundary_from: np.ndarray | None = None  # the action played just before it

    def chunk_merged(self, queued_before: np.ndarray, replace: bool) -> None:
        """A chunk was merged; ``queued_before`` are the robot-space rows still
        queued at that moment (append mode plays them first, replace drops them)."""
        if replace or not len(queued_before):
            self._rows_until_boundary, self._boundary_from = 0, self._last_executed
        else:
            self._rows_until_boundary, self._boundary_from = (
                len(queued_before),
                np.array(queued_before[-1]),
            )

    def overlap_measured(self, executed_meanwhile: np.ndarray, new_chunk: np.ndarray) -> None:
        """``executed_meanwhile``: robot-space rows executed while the chunk was inferred,
        ``new_chunk``: the new chunk in robot space, whose first rows cover the same steps."""
        steps = min(len(executed_meanwhile), len(new_chunk))
        if not steps:
            return
        difference = np.abs(
            np.asarray(new_chunk[:steps], np.float64)
            - np.asarray(executed_meanwhile[:steps], np.float64)
        )
        deviation = float(difference.max(axis=1).mean())
        self.overlaps += 1
        self.deviation_sum += deviation
        self.deviation_max = max(self.deviation_max, deviation)

    def action_executed(self, action: np.ndarray) -> None:
        """A policy action was popped from the queue for execution."""
        at_boundary = self._rows_until_boundary == 0
        if at_boundary:
            if self._boundary_from is not None:
                jump = largest_joint_change(self._boundary_from, action)
                self.boundaries += 1
                self.jump_sum += jump
                self.jump_max = max(self.jump_max, jump)
            self._rows_until_boundary = self._boundary_from = None
        else:
            if self._rows_until_boundary is not None:
                self._rows_until_boundary -= 1
            if self._last_executed is not None:
                self.steps += 1
                self.step_sum += largest_joint_change(self._last_executed, action)
        self._last_executed = np.array(action, dtype=np.float64)

    def queue_cleared(self) -> None:
        """The queued rows are gone, so is the boundary they led to; the last action stays."""
        self._rows_until_boundary = self._boundary_from = None

    def episode_reset(self) -> None:
        """A new episode starts from wherever the robot was put: nothing carries over."""
        self.queue_cleared()
        self._last_executed = None

    @property
    def jump_mean(self) -> float:
        return self.jump_sum / self.boundaries if self.boundaries else 0.0

    @property
    def deviation_mean(self) -> float:
        return self.deviation_sum / self.overlaps if self.overlaps else 0.0

    @property
    def step_mean(self) -> float:
        return self.step_sum / self.steps if self.steps else 0.0
