"""How many robots the server holds within a latency budget: its capacity model.

Invariant: a session is admitted by latency only while the predicted p95
round trip of every robot, the newcomer included, stays within
``latency_budget_ms``; a refusal shows predicted against budget and the
figures behind them, so the robot's placement moves on to another replica.
Budget 0, or no forward measured yet, leaves the decision to the count limit.

Service curve (``ServiceCurve``; windowed by samples and by time):
t(b) = t0 + k*b forward seconds for a batch of b, least squares, never
negative; with one batch size seen no slope can be fitted, so t0 = its median
and k = 0 (too low for bigger batches: warm up at two sizes). h: host CPU
seconds per request outside the forward (admission + finish).

Rate of one robot (``SessionDemand``) at p95 round trip L, with c = chunk_size
/ fps and theta(L) = ``trigger.request_threshold_s``, the queued playback
time at which the executor asks (it rises with L):

    replace (RTC): the answer, L after the request, replaces the queue minus
      the rows played meanwhile, so c - L is queued; the next request leaves
      when that falls to theta, L + (c - L - theta) later:
                                  period = max(1/fps, c - theta(L))
    append: the whole chunk goes behind the queue, one per request: period = c
    rate = max(1 / period, observed rate)     (at most one request per tick)

Two throttles are left out on purpose: one request in flight (period >= L)
and a queue that runs dry before the answer (L > theta adds L - theta). Both
slow only a starving robot (L >= c - theta, over 650 ms with the executor's
defaults at 30 Hz, chunk 50), and crediting them would let the rate fall as
L grows, so a prediction could drop when a robot is added. Without them the
rate never falls as L grows and the model errs high where they would bind.

Server p95 round trip at R requests per second in all (``CapacityModel.load``):

    B   = R*t0 / (1 - R*k)           mean batch: continuous batching takes what
                                     arrived during the last forward, B = R*t(B)
    B95 = min(max_batch_size, max(1, B + 1.645*sqrt(B)))
                                     the batch a p95 request meets: arrivals during
                                     one forward, Poisson with mean B, at its p95
    rho = R*h_mean / S,  S = min(usable_cores, admission_workers + 1 finish thread)
    p95 = h_p95 + 2*t(B95) + rho/(1 - rho) * h_mean

A request waits at most one forward in progress, then runs in the next, both taken at the tail
batch: 2*t(B95). With the mean batch instead (2*t(B)) the model admitted twice the robots the
modeled pi0.5 accelerator held within 200 ms (bench accelerator_capacity: 34 against 16). The host
term is the M/M/1 mean queue wait (twice M/D/1's), a rough allowance for the p95 with S servers.
Saturated (p95 infinite): R*k >= 1, R*t0/(1 - R*k) > max_batch_size, or rho >= 1. Assumed: robots'
requests arrive independently (Poisson counts per forward); the GIL shows only through the
``usable_cores`` passed; transport is not included. Every term grows with R, so adding a robot
never lowers a prediction; robots share one queue, hence one p95 for all.

The rate depends on L, so ``predict`` solves L = p95(sum of rates at L) by
climbing from L = 0; both sides only grow, so the climb reaches the least
fixed point, or saturates, or does not settle: overload.

A robot that asks faster than assumed: its observed rate takes over, the
prediction rises, headroom shrinks and new robots are refused. Admitted
sessions keep running: round robin and one request in flight per session
bound a robot to one request per forward cycle, so it cannot starve the
others; latencies only grow toward the saturated bound.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, replace

from lerobot_ros.protocol.trigger import request_threshold_s

#: ``headroom`` when it cannot be told: no curve yet, or no latency budget.
UNKNOWN_HEADROOM = -1
#: The most extra robots ``headroom`` looks for.
HEADROOM_SEARCH_LIMIT = 1024
_TOLERANCE_S = 1e-7  # a fixed point this close is settled
_MAX_ITERATIONS = 200
TAIL_Z = 1.645  # the standard normal's 95th percentile: the batch a p95 request meets


def _checked_seconds(seconds: float) -> float:
    value = float(seconds)
    if not math.isfinite(value) or value < 0.0:
        raise ValueError(f"duration must be a finite number of seconds >= 0, got {seconds!r}")
    return value


def _percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _fit_line(points: Sequence[tuple[int, float]]) -> tuple[float, float, bool]:
    """(t0, k, slope fitted) of t = t0 + k*b by least squares, clamped to t0, k >= 0."""
    times = [t for _, t in points]
    if len({b for b, _ in points}) < 2:
        return statistics.median(times), 0.0, False
    mean_b = statistics.fmean(b for b, _ in points)
    mean_t = statistics.fmean(times)
    sxx = sum((b - mean_b) ** 2 for b, _ in points)
    k = sum((b - mean_b) * (t - mean_t) for b, t in points) / sxx
    if k < 0.0:  # noise, not a forward that gets faster with more work: flat at the mean
        return mean_t, 0.0, True
    t0 = mean_t - k * mean_b
    if t0 < 0.0:  # a line through the origin fits best with t0 held at 0
        return 0.0, sum(b * t for b, t in points) / sum(b * b for b, _ in points), True
    return t0, k, True


@dataclass(frozen=True)
class CurveSnapshot:
    """The service curve at one moment. Seconds throughout."""

    t0_s: float
    k_s: float  # extra forward seconds per request in the batch
    slope_fitted: bool  # False: one batch size seen, k set to 0
    host_mean_s: float  # 0.0 until a request has been served (warm-up runs forwards only)
    host_p50_s: float
    host_p95_s: float
    forward_samples: int
    host_samples: int

    def forward_s(self, batch_size: float) -> float:
        return self.t0_s + self.k_s * batch_size

    def describe(self) -> str:
        slope = "" if self.slope_fitted else ", one batch size measured"
        return (
            f"forward t(b) = {self.t0_s * 1e3:.1f} + {self.k_s * 1e3:.2f}*b ms{slope}, "
            f"host {self.host_p50_s * 1e3:.1f} ms per request (p95 {self.host_p95_s * 1e3:.1f})"
        )


class ServiceCurve:
    """Forward seconds per batch size and host seconds per request, over a window.

    A sample leaves after ``window`` newer ones or when it is ``window_s``
    older than the newest of its kind: an idle server keeps its last curve.
    Thread-safe: the forward and finish threads record, the service thread reads.
    """

    def __init__(self, window: int = 200, window_s: float = 60.0) -> None:
        if window < 1 or not window_s > 0:
            raise ValueError(
                f"window must be >= 1 sample and window_s > 0, got {window} and {window_s}"
            )
        self._window_s = float(window_s)
        self._forwards: deque[tuple[float, int, float]] = deque(maxlen=int(window))
        self._hosts: deque[tuple[float, float]] = deque(maxlen=int(window))
        self._lock = threading.Lock()

    def record_forward(self, batch_size: int, seconds: float, at_s: float | None = None) -> None:
        """One forward of ``batch_size`` requests took ``seconds`` (warm-up forwards count too)."""
        if int(batch_size) != batch_size or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self._record(self._forwards, (int(batch_size), _checked_seconds(seconds)), at_s)

    def record_host(self, seconds: float, at_s: float | None = None) -> None:
        """One request took ``seconds`` of host work outside the forward (admission + finish)."""
        self._record(self._hosts, (_checked_seconds(seconds),), at_s)

    def _record(self, samples: deque, values: tuple, at_s: float | None) -> None:
        now = time.monotonic() if at_s is None else float(at_s)
        with self._lock:
            samples.append((now, *values))
            while samples[0][0] < now - self._window_s:
                samples.popleft()

    def snapshot(self) -> CurveSnapshot | None:
        """The fitted curve; None before any forward was measured."""
        with self._lock:
            forwards = [(b, t) for _, b, t in self._forwards]
            hosts = [t for _, t in self._hosts]
        if not forwards:
            return None
        t0, k, fitted = _fit_line(forwards)
        host = (
            (statistics.fmean(hosts), _percentile(hosts, 50), _percentile(hosts, 95))
            if hosts
            else (0.0,) * 3
        )
        return CurveSnapshot(t0, k, fitted, *host, len(forwards), len(hosts))


@dataclass(frozen=True)
class SessionDemand:
    """What one robot asks of the server. Defaults are the executor's parameters."""

    fps: float
    chunk_size: int
    replace_mode: bool = True  # RTC: each chunk replaces the queue
    buffer_time_s: float = 0.5
    latency_margin: float = 1.5
    max_action_age_s: float = 3.0
    observed_rate_hz: float = 0.0  # requests counted over a recent window; 0: none yet

    def __post_init__(self) -> None:
        if not (math.isfinite(self.fps) and self.fps > 0) or self.chunk_size < 1:
            raise ValueError(
                f"fps must be > 0 and chunk_size >= 1, got {self.fps} and {self.chunk_size}"
            )

    def period_s(self, latency_p95_s: float) -> float:
        """Seconds from one request to the next while round trips take ``latency_p95_s``."""
        chunk_s = self.chunk_size / self.fps
        threshold = request_threshold_s(
            self.buffer_time_s,
            latency_p95_s,
            self.latency_margin,
            self.fps,
            self.chunk_size,
            self.max_action_age_s,
            self.replace_mode,
        )
        return max(1.0 / self.fps, chunk_s - threshold if self.replace_mode else chunk_s)

    def rate_hz(self, latency_p95_s: float) -> float:
        """Requests per second the model counts: the declared rate, or the observed one if
        higher."""
        return max(1.0 / self.period_s(latency_p95_s), self.observed_rate_hz)


@dataclass(frozen=True)
class Prediction:
    robots: int
    p95_s: float  # math.inf when saturated
    rates_hz: tuple[float, float]  # lowest and highest per-robot rate at p95_s
    total_rate_hz: float
    mean_batch: float
    host_utilisation: float
    saturated: str = ""  # why the p95 is unbounded; empty when it is not

    def describe(self, curve: CurveSnapshot) -> str:
        low, high = self.rates_hz
        each = f"{low:.2f} each" if math.isclose(low, high) else f"{low:.2f} to {high:.2f} each"
        return (
            f"{curve.describe()}, mean batch {self.mean_batch:.1f}, host utilisation "
            f"{self.host_utilisation:.0%}, {self.robots} robots asking {self.total_rate_hz:.1f} "
            f"req/s ({each})"
        )


@dataclass(frozen=True)
class CapacityDecision:
    accepted: bool
    message: str = ""
    prediction: Prediction | None = None  # None: not decided by latency (budget 0 or no curve)


def _budget_is_off(budget_s: float) -> bool:
    if not (math.isfinite(budget_s) and budget_s >= 0.0):
        raise ValueError(
            f"budget_s must be a finite number of seconds >= 0 (0: off), got {budget_s}"
        )
    return budget_s == 0.0


@dataclass(frozen=True)
class _Load:
    p95_s: float
    mean_batch: float
    host_utilisation: float
    saturated: str


@dataclass
class CapacityModel:
    """Predictions and admission decisions from one ``ServiceCurve``."""

    curve: ServiceCurve
    max_batch_size: int
    admission_workers: int
    usable_cores: float

    @property
    def host_servers(self) -> float:
        return min(self.usable_cores, self.admission_workers + 1)  # + 1: the finish thread

    def load(self, curve: CurveSnapshot, total_rate_hz: float) -> _Load:
        """The server's p95 round trip when asked ``total_rate_hz`` requests per second."""
        rate, t0, k = total_rate_hz, curve.t0_s, curve.k_s
        rho = rate * curve.host_mean_s / self.host_servers
        if rate * k >= 1.0:
            return _Load(
                math.inf,
                math.inf,
                rho,
                f"the accelerator is saturated: {rate:.1f} req/s x "
                f"{k * 1e3:.2f} ms per extra request >= 1, each forward grows faster than it "
                "drains",
            )
        batch = rate * t0 / (1.0 - rate * k)
        if batch > self.max_batch_size:
            most = self.max_batch_size / curve.forward_s(self.max_batch_size)
            return _Load(
                math.inf,
                batch,
                rho,
                f"the accelerator is saturated: {rate:.1f} req/s asked, forwards "
                f"of max_batch_size {self.max_batch_size} serve at most {most:.1f} req/s",
            )
        if rho >= 1.0:
            return _Load(
                math.inf,
                max(1.0, batch),
                rho,
                f"the host is saturated: {rate:.1f} req/s x "
                f"{curve.host_mean_s * 1e3:.1f} ms = {rate * curve.host_mean_s:.2f} CPU s/s, "
                "above the "
                f"{self.host_servers:g} usable (min(cores {self.usable_cores:g}, "
                "admission_workers "
                f"{self.admission_workers} + the finish thread))",
            )
        tail_batch = min(float(self.max_batch_size), max(1.0, batch + TAIL_Z * math.sqrt(batch)))
        queueing_s = rho / (1.0 - rho) * curve.host_mean_s
        return _Load(
            curve.host_p95_s + 2.0 * curve.forward_s(tail_batch) + queueing_s,
            max(1.0, batch),
            rho,
            "",
        )

    def predict(
        self,
        sessions: Sequence[SessionDemand],
        extra: SessionDemand | None = None,
        extra_count: int = 0,
        curve: CurveSnapshot | None = None,
    ) -> Prediction | None:
        """Solve L = p95(sum of rates at L) for ``sessions`` plus ``extra_count`` robots like
        ``extra``."""
        curve = curve or self.curve.snapshot()
        if curve is None:
            return None
        # Equal demands counted once each step: a fleet of like robots costs as much as one.
        counts = Counter(sessions)
        if extra is not None and extra_count:
            counts[extra] += extra_count
        groups = list(counts.items())

        def load_at(latency_s: float) -> _Load:
            return self.load(
                curve, sum(demand.rate_hz(latency_s) * count for demand, count in groups)
            )

        def settled(latency_s: float, load: _Load) -> Prediction:
            rates = [demand.rate_hz(latency_s) for demand, _ in groups] or [0.0]
            total = sum(rate * count for rate, (_, count) in zip(rates, groups, strict=False))
            return Prediction(
                sum(count for _, count in groups),
                load.p95_s,
                (min(rates), max(rates)),
                total,
                load.mean_batch,
                load.host_utilisation,
                load.saturated,
            )

        latency_s = 0.0
        for _ in range(_MAX_ITERATIONS):
            load = load_at(latency_s)
            if load.saturated and latency_s > 0.0:  # the rates it saturated at were raised by L
                load = replace(
                    load,
                    saturated=f"{load.saturated}, as the robots' triggers ask earlier at "
                    f"the p95 of {latency_s * 1e3:.0f} ms the step before",
                )
            if load.saturated or load.p95_s - latency_s <= _TOLERANCE_S:
                return settled(latency_s, load)
            latency_s = load.p95_s
        return settled(
            latency_s,
            _Load(
                math.inf,
                load.mean_batch,
                load.host_utilisation,
                f"the round trip does not settle after {_MAX_ITERATIONS} steps (last "
                f"{latency_s * 1e3:.0f} ms): the robots' triggers outrun the server",
            ),
        )

    def decide(
        self, admitted: Sequence[SessionDemand], candidate: SessionDemand, budget_s: float
    ) -> CapacityDecision:
        """Admit ``candidate`` only while every robot's predicted p95, its own included, fits
        ``budget_s``."""
        if _budget_is_off(budget_s):
            return CapacityDecision(True)
        curve = self.curve.snapshot()
        if curve is None:
            return CapacityDecision(
                True, "no forward measured yet: admitted on the session count alone"
            )
        prediction = self.predict(admitted, candidate, 1, curve=curve)
        if prediction.p95_s <= budget_s:
            return CapacityDecision(True, prediction=prediction)
        budget = f"latency_budget_ms {budget_s * 1e3:g}"
        if prediction.saturated:
            why = f"with {prediction.robots} robots {prediction.saturated}; {budget}"
        else:
            why = (
                f"predicted p95 round trip {prediction.p95_s * 1e3:.0f} ms with "
                f"{prediction.robots} robots "
                f"exceeds {budget}"
            )
        return CapacityDecision(
            False, f"{why} ({prediction.describe(curve)}); try another replica", prediction
        )

    def headroom(
        self, admitted: Sequence[SessionDemand], probe: SessionDemand, budget_s: float
    ) -> int:
        """How many more robots like ``probe`` fit the budget (at most HEADROOM_SEARCH_LIMIT); -1:
        unknown."""
        curve = self.curve.snapshot()
        if _budget_is_off(budget_s) or curve is None:
            return UNKNOWN_HEADROOM

        def fits(count: int) -> bool:
            return self.predict(admitted, probe, count, curve=curve).p95_s <= budget_s

        low, high = 0, HEADROOM_SEARCH_LIMIT + 1  # predictions grow with the count, so bisect
        while high - low > 1:
            middle = (low + high) // 2
            low, high = (middle, high) if fits(middle) else (low, middle)
        return low
