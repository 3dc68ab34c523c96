"""The capacity model: service curve fit, request rates, predicted p95 and admission (no ROS)."""

import math
import random

import pytest

from lerobot_ros.executor.settings import PARAMETERS as EXECUTOR_PARAMETERS
from lerobot_ros.protocol import trigger
from lerobot_ros.server.sessions import capacity_model as capacity
from lerobot_ros.server.sessions.capacity_model import (
    HEADROOM_SEARCH_LIMIT,
    UNKNOWN_HEADROOM,
    CapacityModel,
    ServiceCurve,
    SessionDemand,
)

ROBOT = SessionDemand(fps=30.0, chunk_size=50)  # RTC replace, the executor's trigger defaults
CHUNK_S = 50 / 30.0
BUDGET_S = 0.200
T0, K, HOST = 0.005, 0.0005, 0.004  # the act-gpu profile of issue 32, host 4 ms per request


def curve_of(t0, k, host=None, sizes=(1, 2, 4, 8)):
    curve = ServiceCurve()
    for size in sizes:
        curve.record_forward(size, t0 + k * size, at_s=0.0)
    if host is not None:
        curve.record_host(host, at_s=0.0)
    return curve


def model_of(t0=T0, k=K, host=HOST, max_batch_size=64, workers=1, cores=2.0):
    return CapacityModel(curve_of(t0, k, host), max_batch_size, workers, cores)


def hand_p95(total_rate, t0=T0, k=K, host=HOST, servers=2.0):
    """The docstring's formula, written out again, with one host time for mean and p95."""
    batch = total_rate * t0 / (1.0 - total_rate * k)
    tail = min(64.0, max(1.0, batch + 1.645 * batch**0.5))
    rho = total_rate * host / servers
    return host + 2.0 * (t0 + k * tail) + rho / (1.0 - rho) * host


def robots_within(budget_s, rate):
    """Brute force: the most robots, all asking ``rate``, whose hand p95 fits the budget.

    It is also the admitted count at which the first candidate is refused."""
    n = 0
    while hand_p95((n + 1) * rate) <= budget_s:
        n += 1
    return n


# ---------------------------------------------------------------- service curve


def test_fit_recovers_t0_and_k_from_exact_samples():
    snapshot = curve_of(0.035, 0.004, sizes=(1, 2, 3, 5, 8, 13)).snapshot()
    assert snapshot.t0_s == pytest.approx(0.035, abs=1e-12)
    assert snapshot.k_s == pytest.approx(0.004, abs=1e-12)
    assert snapshot.slope_fitted
    assert snapshot.forward_samples == 6


def test_fit_recovers_t0_and_k_from_noisy_samples():
    rng = random.Random(7)
    curve = ServiceCurve(window=200)
    for _ in range(200):
        size = rng.randint(1, 16)
        curve.record_forward(size, (T0 + K * size) * (1.0 + rng.gauss(0.0, 0.05)), at_s=0.0)
    snapshot = curve.snapshot()
    assert snapshot.t0_s == pytest.approx(T0, abs=0.0005)
    assert snapshot.k_s == pytest.approx(K, abs=0.0001)


def test_one_batch_size_gives_the_median_and_no_slope():
    curve = ServiceCurve()
    for seconds in (0.005, 0.006, 0.100):
        curve.record_forward(1, seconds, at_s=0.0)
    snapshot = curve.snapshot()
    assert (snapshot.t0_s, snapshot.k_s, snapshot.slope_fitted) == (0.006, 0.0, False)
    assert "one batch size measured" in snapshot.describe()


def test_fit_never_goes_negative():
    falling = curve_of(0.010, -0.001).snapshot()  # 9, 8, 6, 2 ms: noise, not a real speed-up
    assert falling.k_s == 0.0
    assert falling.t0_s == pytest.approx((0.009 + 0.008 + 0.006 + 0.002) / 4)
    steep = curve_of(-0.002, 0.003).snapshot()  # would cross below zero at b = 0
    assert steep.t0_s == 0.0 and steep.k_s > 0.0


def test_window_forgets_samples_beyond_its_count():
    curve = ServiceCurve(window=10)
    for _ in range(10):
        curve.record_forward(1, 1.0, at_s=0.0)
    for _ in range(10):
        curve.record_forward(1, 0.01, at_s=0.0)
    assert curve.snapshot().t0_s == 0.01


def test_window_forgets_samples_older_than_its_time_but_an_idle_server_keeps_its_curve():
    curve = ServiceCurve(window=200, window_s=60.0)
    for size in (1, 8):
        curve.record_forward(size, 1.0, at_s=0.0)
    for size in (1, 2):
        curve.record_forward(size, T0 + K * size, at_s=50.0)
    assert curve.snapshot().forward_samples == 4  # 50 s apart: all within the window
    curve.record_forward(4, T0 + K * 4, at_s=100.0)
    snapshot = curve.snapshot()
    assert snapshot.forward_samples == 3
    assert (snapshot.t0_s, snapshot.k_s) == (pytest.approx(T0), pytest.approx(K))


def test_host_time_is_reported_as_median_and_p95():
    curve = curve_of(T0, K)
    for ms in range(1, 101):
        curve.record_host(ms / 1000.0, at_s=0.0)
    snapshot = curve.snapshot()
    assert snapshot.host_p50_s == pytest.approx(0.0505)
    assert snapshot.host_p95_s == pytest.approx(0.09505)
    assert snapshot.host_samples == 100


@pytest.mark.parametrize(
    ("batch_size", "seconds"), [(0, 0.01), (1.5, 0.01), (1, -0.001), (1, math.nan)]
)
def test_records_refuse_impossible_samples(batch_size, seconds):
    with pytest.raises(ValueError):
        ServiceCurve().record_forward(batch_size, seconds)


def test_no_forward_measured_means_no_curve_and_count_only_admission():
    curve = ServiceCurve()
    curve.record_host(HOST)  # host time alone is no curve
    model = CapacityModel(curve, 64, 1, 2.0)
    assert curve.snapshot() is None
    assert model.predict([ROBOT]) is None
    decision = model.decide([ROBOT] * 1000, ROBOT, BUDGET_S)
    assert decision.accepted and decision.prediction is None
    assert "no forward measured" in decision.message
    assert model.headroom([], ROBOT, BUDGET_S) == UNKNOWN_HEADROOM
    curve.record_forward(1, T0 + K)  # a warm-up forward is enough
    assert model.headroom([], ROBOT, BUDGET_S) >= 0


# ---------------------------------------------------------------- request rates


def test_the_executors_trigger_and_defaults_are_used():
    assert capacity.request_threshold_s is trigger.request_threshold_s
    defaults = {parameter.name: parameter.default for parameter in EXECUTOR_PARAMETERS}
    assert ROBOT.buffer_time_s == defaults["buffer_time_s"]
    assert ROBOT.latency_margin == defaults["request_latency_margin"]
    assert ROBOT.max_action_age_s == defaults["max_action_age_s"]


@pytest.mark.parametrize(
    ("latency_s", "period_s"),
    [
        (0.1, CHUNK_S - 0.5),  # threshold at buffer_time_s
        (0.4, CHUNK_S - (1.5 * 0.4 + 1 / 30)),  # threshold risen with the latency
        (2.0, 1 / 30),  # threshold capped at a chunk: the trigger would ask on every tick
    ],
)
def test_replace_mode_period_by_hand(latency_s, period_s):
    assert ROBOT.period_s(latency_s) == pytest.approx(period_s)
    assert ROBOT.rate_hz(latency_s) == pytest.approx(1.0 / period_s)


@pytest.mark.parametrize("latency_s", [0.1, 1.0, 1.5, 3.0])
def test_append_mode_period_is_one_chunk(latency_s):
    assert SessionDemand(30.0, 50, replace_mode=False).period_s(latency_s) == pytest.approx(
        CHUNK_S
    )


@pytest.mark.parametrize(
    "robot",
    [
        ROBOT,
        SessionDemand(30.0, 50, False),
        SessionDemand(50.0, 20, buffer_time_s=0.1, latency_margin=0.5),
    ],
)
def test_rate_never_falls_as_the_round_trip_grows(robot):
    rates = [robot.rate_hz(ms / 1000.0) for ms in range(0, 3000, 5)]
    assert all(later >= earlier for earlier, later in zip(rates, rates[1:], strict=False))
    assert rates[-1] <= robot.fps


def test_observed_rate_counts_when_faster_than_declared():
    assert SessionDemand(30.0, 50, observed_rate_hz=5.0).rate_hz(0.1) == 5.0
    assert SessionDemand(30.0, 50, observed_rate_hz=0.1).rate_hz(0.1) == pytest.approx(
        1 / (CHUNK_S - 0.5)
    )


# ---------------------------------------------------------------- fixed point and prediction


def test_replace_fixed_point_with_a_constant_round_trip():
    # p95 = 2 x 200 ms whatever the load
    model = CapacityModel(curve_of(0.2, 0.0, 0.0), 64, 1, 2.0)
    prediction = model.predict([ROBOT] * 3)
    assert prediction.p95_s == pytest.approx(0.4)
    assert prediction.total_rate_hz == pytest.approx(3 / (CHUNK_S - (1.5 * 0.4 + 1 / 30)))


def test_replace_fixed_point_matches_a_hand_solution():
    # a slow forward: the threshold leaves buffer_time_s
    t0, k, host, robots = (
        0.150,
        0.004,
        0.010,
        20,
    )

    def hand_rate(latency):
        return 1.0 / (CHUNK_S - max(0.5, min(1.5 * latency + 1 / 30, CHUNK_S)))

    def equation(latency):
        return hand_p95(robots * hand_rate(latency), t0, k, host) - latency

    assert equation(0.0) > 0 > equation(0.5)
    low, high = 0.0, 0.5
    for _ in range(100):
        middle = (low + high) / 2
        low, high = (middle, high) if equation(middle) > 0 else (low, middle)
    prediction = model_of(t0, k, host).predict([ROBOT] * robots)
    # above 311 ms, where the threshold rises with L: the rate followed the latency
    assert high > 0.32
    assert prediction.p95_s == pytest.approx(high, abs=1e-5)
    assert prediction.total_rate_hz == pytest.approx(robots * hand_rate(high), rel=1e-4)
    assert prediction.total_rate_hz > robots / (CHUNK_S - 0.5)


def test_append_fixed_point_matches_a_hand_solution():
    robots = 20
    prediction = model_of(0.150, 0.004, 0.010).predict(
        [SessionDemand(30.0, 50, replace_mode=False)] * robots
    )
    assert prediction.total_rate_hz == pytest.approx(robots / CHUNK_S)
    assert prediction.p95_s == pytest.approx(
        hand_p95(robots / CHUNK_S, 0.150, 0.004, 0.010), abs=1e-6
    )


def test_a_trigger_that_asks_earlier_as_latency_grows_can_overload_the_server():
    model = CapacityModel(curve_of(T0, K, 0.105), 64, 0, 1.0)  # a slow host, one usable core
    # At the declared rate the host would hold 9 robots (rho 0.81, p95 563 ms)...
    declared_p95 = hand_p95(9 / (CHUNK_S - 0.5), host=0.105, servers=1.0)
    assert declared_p95 == pytest.approx(0.564, abs=0.001)
    # ...but at that p95 their triggers ask earlier, and the host saturates.
    prediction = model.predict([ROBOT] * 9)
    assert math.isinf(prediction.p95_s)
    assert "host is saturated" in prediction.saturated
    assert (
        f"triggers ask earlier at the p95 of {declared_p95 * 1e3:.0f} ms" in prediction.saturated
    )
    # Append-mode robots keep asking once a chunk: the same server holds them.
    assert math.isfinite(model.predict([SessionDemand(30.0, 50, replace_mode=False)] * 9).p95_s)


@pytest.mark.parametrize(
    ("t0", "k", "host", "most"), [(T0, K, HOST, 700), (0.035, 0.004, 0.010, 300)]
)
def test_prediction_never_falls_as_robots_are_added(t0, k, host, most):
    model = model_of(t0, k, host)
    previous = 0.0
    for robots in range(1, most):
        p95 = model.predict([ROBOT] * robots).p95_s
        assert p95 >= previous
        previous = p95
    assert math.isinf(previous)  # the sweep reaches saturation


# ---------------------------------------------------------------- admission and headroom


def test_admission_refuses_exactly_at_the_first_robot_over_budget():
    # every p95 here is below 311 ms, so the threshold is buffer_time_s
    rate = 1.0 / (CHUNK_S - 0.5)
    most = robots_within(BUDGET_S, rate)
    assert hand_p95(most * rate) < 0.311 and 500 < most < 600
    model = model_of()
    for admitted in range(most + 3):
        decision = model.decide([ROBOT] * admitted, ROBOT, BUDGET_S)
        assert decision.accepted == (admitted + 1 <= most), admitted
    refused = model.decide([ROBOT] * most, ROBOT, BUDGET_S)
    assert refused.prediction.p95_s == pytest.approx(hand_p95((most + 1) * rate))


def test_refusal_message_carries_predicted_and_budget():
    rate = 1.0 / (CHUNK_S - 0.5)
    most = robots_within(BUDGET_S, rate)
    message = model_of().decide([ROBOT] * most, ROBOT, BUDGET_S).message
    predicted_ms = f"{hand_p95((most + 1) * rate) * 1e3:.0f} ms"
    assert (
        f"predicted p95 round trip {predicted_ms} with {most + 1} robots exceeds "
        "latency_budget_ms 200" in message
    )
    assert "t(b) = 5.0 + 0.50*b ms" in message and "host 4.0 ms per request" in message
    assert "0.86 each" in message and "another replica" in message


def test_headroom_is_the_first_refusal_less_the_admitted():
    most = robots_within(BUDGET_S, 1.0 / (CHUNK_S - 0.5))
    model = model_of()
    for admitted in (0, 1, 100, most - 1, most, most + 5):
        assert model.headroom([ROBOT] * admitted, ROBOT, BUDGET_S) == max(0, most - admitted), (
            admitted
        )


def test_headroom_search_is_bounded():
    model = CapacityModel(curve_of(0.0001, 0.0, 0.0), 4096, 1, 2.0)
    assert model.headroom([], ROBOT, 10.0) == HEADROOM_SEARCH_LIMIT


def test_budget_zero_always_admits():
    model = model_of(host=1.0)  # the host saturates long before 5000 robots
    decision = model.decide([ROBOT] * 5000, ROBOT, 0.0)
    assert decision.accepted and decision.prediction is None
    assert model.headroom([ROBOT] * 5000, ROBOT, 0.0) == UNKNOWN_HEADROOM
    for bad in (-0.1, math.nan):
        with pytest.raises(ValueError):
            model.decide([], ROBOT, bad)
        with pytest.raises(ValueError):
            model.headroom([], ROBOT, bad)


@pytest.mark.parametrize(
    ("model", "robots", "rate_hz", "in_message"),
    [
        # R*k >= 1: 2 x 60 req/s x 10 ms per extra request
        (
            CapacityModel(curve_of(0.001, 0.010, 0.0), 1000, 1, 2.0),
            2,
            60.0,
            "with 2 robots the accelerator is saturated: 120.0 req/s x 10.00 ms",
        ),
        # B = 81 x 1 req/s x 50 ms = 4.05 above max_batch_size 4
        (
            CapacityModel(curve_of(0.050, 0.0, 0.0), 4, 1, 2.0),
            81,
            1.0,
            "with 81 robots the accelerator is saturated: 81.0 req/s asked, forwards of "
            "max_batch_size 4 serve at most "
            "80.0 req/s",
        ),
        # 10 req/s x 100 ms = 1.0 CPU s/s on one usable core
        (
            CapacityModel(curve_of(T0, 0.0, 0.100), 64, 4, 1.0),
            10,
            1.0,
            "with 10 robots the host is saturated: 10.0 req/s x 100.0 ms = 1.00 CPU s/s, above "
            "the 1 usable",
        ),
    ],
)
def test_saturation_is_refused_whatever_the_budget(model, robots, rate_hz, in_message):
    # one rate whatever the p95
    fast = SessionDemand(30.0, 50, replace_mode=False, observed_rate_hz=rate_hz)
    decision = model.decide([fast] * (robots - 1), fast, budget_s=60.0)
    assert not decision.accepted
    assert math.isinf(decision.prediction.p95_s)
    assert in_message in decision.message and "latency_budget_ms 60000" in decision.message
    assert model.decide(
        [fast] * (robots - 2), fast, budget_s=60.0
    ).accepted  # one robot fewer fits


def test_an_underestimated_robot_raises_the_prediction_and_shrinks_headroom():
    model = model_of(host=0.020)  # a slower host, so 20 robots are a real load
    declared = [ROBOT] * 20
    fast = [SessionDemand(30.0, 50, observed_rate_hz=10.0)] + [ROBOT] * 19
    honest, real = model.predict(declared), model.predict(fast)
    assert real.p95_s > honest.p95_s
    assert real.rates_hz[1] == 10.0
    assert real.total_rate_hz == pytest.approx(honest.total_rate_hz - honest.rates_hz[0] + 10.0)
    assert model.headroom(fast, ROBOT, BUDGET_S) < model.headroom(declared, ROBOT, BUDGET_S)
