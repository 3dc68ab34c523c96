"""The capacity model applied to this server's sessions: admission by predicted latency, and the
headroom it reports.

Invariants: with ``latency_budget_ms`` 0, or before any forward was
measured, nothing is refused here (the session count limit decides); a
robot is counted at the rate it declares (its fps, the policy's chunk, RTC
or append) or at the rate it is observed asking, whichever is higher, so a
robot that asks faster than declared shrinks the headroom instead of hiding
in it. A warm standby (sessions.py) has asked nothing yet and is counted
at its declared rate like any robot: the place it reserves is taken from the
headroom, and promoting it never pushes the server past its budget. The
headroom is counted in robots like a probe: the policy's trained rate (or
30 Hz), its chunk, RTC when the server offers it. Plain Python.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from lerobot_ros.protocol.contract import ServerCapabilities
from lerobot_ros.server.sessions.capacity_model import (
    UNKNOWN_HEADROOM,
    CapacityModel,
    ServiceCurve,
    SessionDemand,
)
from lerobot_ros.server.sessions.registry import Session

#: Rate a probe robot asks at when the checkpoint names no trained fps.
PROBE_FPS = 30.0
#: How long one headroom figure is reused: heartbeats, GetStatus and /metrics read it several times
#: a second.
REPORT_REUSE_S = 1.0


@dataclass(frozen=True)
class CapacityReport:
    """What status, the heartbeat and /metrics show: robots that still fit, and the p95 predicted
    now."""

    headroom_robots: int  # -1: unknown (no budget or nothing measured yet)
    predicted_p95_ms: float  # 0: nothing to predict
    latency_budget_ms: float


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


class CapacityGate:
    def __init__(
        self,
        capabilities: ServerCapabilities,
        curve: ServiceCurve | None = None,
        clock=time.monotonic,
    ) -> None:
        self.capabilities = capabilities
        self.curve = curve or ServiceCurve()
        self._clock = clock
        self.configure(0.0, 1, 1)
        self._report: tuple[float, CapacityReport] | None = None

    def configure(
        self, latency_budget_ms: float, max_batch_size: int, admission_workers: int
    ) -> None:
        """Settings in force (configure, and runtime parameter changes)."""
        self.budget_s = latency_budget_ms / 1000.0
        self.model = CapacityModel(self.curve, max_batch_size, admission_workers, usable_cores())
        self._report = None

    def demand(
        self, fps: float, rtc_enabled: bool, observed_rate_hz: float = 0.0
    ) -> SessionDemand:
        # Observed rates rounded to 0.1 Hz: like robots stay equal demands, which the model counts
        # once.
        return SessionDemand(
            fps=fps,
            chunk_size=max(1, self.capabilities.chunk_size),
            replace_mode=rtc_enabled,
            observed_rate_hz=round(observed_rate_hz, 1),
        )

    def demands(self, sessions: list[Session], excluding_client: str = "") -> list[SessionDemand]:
        now = self._clock()
        return [
            self.demand(session.fps, session.rtc_enabled, session.observed_rate_hz(now))
            for session in sessions
            if session.client_id != excluding_client and session.fps > 0
        ]

    def refusal(
        self, fps: float, rtc_enabled: bool, sessions: list[Session], client_id: str
    ) -> str | None:
        """Why a robot of ``fps`` would break the budget (predicted vs budget), or None to admit
        it.
        A re-opening robot is not counted twice."""
        decision = self.model.decide(
            self.demands(sessions, client_id), self.demand(fps, rtc_enabled), self.budget_s
        )
        return None if decision.accepted else decision.message

    def probe(self) -> SessionDemand:
        fps = self.capabilities.trained_fps if self.capabilities.trained_fps > 0 else PROBE_FPS
        return self.demand(fps, self.capabilities.rtc_enabled)

    def report(self, sessions: list[Session]) -> CapacityReport:
        now = self._clock()
        if self._report is not None and now - self._report[0] < REPORT_REUSE_S:
            return self._report[1]
        admitted = self.demands(sessions)
        prediction = self.model.predict(admitted) if admitted else None
        report = CapacityReport(
            headroom_robots=self.model.headroom(admitted, self.probe(), self.budget_s),
            predicted_p95_ms=prediction.p95_s * 1000.0 if prediction is not None else 0.0,
            latency_budget_ms=self.budget_s * 1000.0,
        )
        self._report = (now, report)
        return report


__all__ = ["UNKNOWN_HEADROOM", "CapacityGate", "CapacityReport", "usable_cores"]
