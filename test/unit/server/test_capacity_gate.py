"""The capacity model applied to sessions: admission by predicted p95, observed rates, the reported
headroom."""

import pytest

from lerobot_ros.protocol.contract import (
    SCHEMA_VERSION,
    CameraSpec,
    OpenRequest,
    ServerCapabilities,
)
from lerobot_ros.server.sessions.capacity_gate import CapacityGate, usable_cores
from lerobot_ros.server.sessions.capacity_model import CapacityModel, ServiceCurve, SessionDemand
from lerobot_ros.server.sessions.open_checks import Refusal, ServerLoad
from lerobot_ros.server.sessions.registry import Session, SessionRegistry
from lerobot_ros.server.sessions.session_opening import decide_open
from lerobot_ros.server.settings import ServerSettings

NAMES = ("shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll", "gripper")
CAPABILITIES = ServerCapabilities(
    model_id="ckpt",
    model_fingerprint="abc",
    policy_type="pi05",
    action_names=NAMES,
    state_dim=6,
    cameras=(CameraSpec("observation.images.front", 96, 128),),
    chunk_size=50,
    trained_fps=30.0,
    rtc_supported=True,
    rtc_enabled=True,
)
SETTINGS = ServerSettings.from_values({"checkpoint": "/ckpt"})


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def pi05_gate(budget_ms, clock=None):
    """A gate whose curve is the published pi0.5 serving curve: t(b) = 58 + 16 b ms, 4 ms of host
    per request."""
    curve = ServiceCurve()
    for batch in (1, 2, 4, 8):
        curve.record_forward(batch, 0.058 + 0.016 * batch)
    for _ in range(20):
        curve.record_host(0.004)
    gate = CapacityGate(CAPABILITIES, curve, clock=clock or Clock())
    gate.configure(budget_ms, max_batch_size=64, admission_workers=2)
    return gate


def robots(count, fps=30.0, rtc=True):
    return [Session(f"arm_{i}", "", fps, rtc, opened_at=0.0) for i in range(count)]


def first_refused(gate, fps=30.0):
    """The first robot count the model refuses, found by the model itself one robot at a time."""
    sessions = []
    while gate.refusal(fps, True, sessions, f"arm_{len(sessions)}") is None:
        sessions.append(Session(f"arm_{len(sessions)}", "", fps, True, opened_at=0.0))
        assert len(sessions) < 500
    return len(sessions) + 1


def test_without_a_budget_or_a_curve_nothing_is_refused_and_the_headroom_is_unknown():
    assert pi05_gate(0.0).refusal(30.0, True, robots(400), "new") is None
    assert pi05_gate(0.0).report(robots(3)).headroom_robots == -1
    empty = CapacityGate(CAPABILITIES)
    empty.configure(200.0, 64, 2)
    assert empty.refusal(30.0, True, robots(50), "new") is None
    assert empty.report(robots(2)).headroom_robots == -1


def test_the_budget_refuses_exactly_the_robot_that_would_break_it_and_says_predicted_vs_budget():
    gate = pi05_gate(400.0)
    refused_at = first_refused(gate)
    model = CapacityModel(gate.curve, 64, 2, usable_cores())
    demand = SessionDemand(30.0, 50, replace_mode=True)
    assert (
        model.predict([demand] * (refused_at - 1)).p95_s
        <= 0.4
        < model.predict([demand] * refused_at).p95_s
    )
    message = gate.refusal(30.0, True, robots(refused_at - 1), "newcomer")
    assert f"with {refused_at} robots" in message and "latency_budget_ms 400" in message
    assert "forward t(b) = 58.0 + 16.00*b ms" in message and "try another replica" in message
    # The report counts what still fits: the robots admitted so far plus the headroom is the
    # refusal point.
    for admitted in (0, 1, refused_at - 1):
        assert (
            pi05_gate(400.0).report(robots(admitted)).headroom_robots == refused_at - 1 - admitted
        )
    assert 1 < first_refused(pi05_gate(200.0)) < refused_at  # a tighter budget holds fewer robots


def test_a_reopening_robot_is_not_counted_twice():
    gate = pi05_gate(400.0)
    admitted = robots(first_refused(gate) - 1)
    assert gate.refusal(30.0, True, admitted, "newcomer") is not None
    assert gate.refusal(30.0, True, admitted, admitted[0].client_id) is None


def test_a_robot_asking_faster_than_declared_is_counted_at_its_observed_rate():
    clock = Clock()
    gate = pi05_gate(400.0, clock)
    admitted = robots(3)
    before = gate.report(admitted)
    # arm_0 asks at 20 Hz, far above the ~1.4 Hz its 30 fps and chunk 50 declare
    for step in range(60):
        admitted[0].arrivals.append(clock.now + step * 0.05)
    clock.now += 3.0
    assert admitted[0].observed_rate_hz(clock.now) == pytest.approx(20.0)
    after = gate.report(admitted)
    assert (
        after.predicted_p95_ms > before.predicted_p95_ms
        and after.headroom_robots < before.headroom_robots
    )


def test_the_report_is_reused_for_a_second_then_recomputed():
    clock = Clock()
    gate = pi05_gate(400.0, clock)
    first = gate.report(robots(1))
    assert gate.report(robots(5)) is first
    clock.now += 1.5
    assert gate.report(robots(5)).headroom_robots == first.headroom_robots - 4


def test_a_session_opening_is_refused_for_capacity_with_the_models_message():
    sessions = SessionRegistry()
    request = OpenRequest(
        "arm_new",
        SCHEMA_VERSION,
        NAMES,
        6,
        ("observation.images.front",),
        30.0,
        rtc_requested=True,
    )
    room = ServerLoad(ready=True, draining=False, active_sessions=0, max_sessions=8)
    asked = []
    decision = decide_open(
        request,
        "",
        CAPABILITIES,
        room,
        sessions,
        SETTINGS,
        latency_refusal=lambda open_request, rtc: asked.append(rtc) or "predicted p95 too high",
    )
    assert decision.session is None and decision.refusal is Refusal.CAPACITY
    assert (
        decision.message == "predicted p95 too high" and asked == [True] and sessions.count() == 0
    )
    admitted = decide_open(
        request, "", CAPABILITIES, room, sessions, SETTINGS, latency_refusal=lambda r, rtc: None
    )
    assert admitted.session is not None


def test_an_observed_rate_needs_a_few_arrivals_over_a_second():
    session = robots(1)[0]
    assert session.observed_rate_hz(10.0) == 0.0
    session.arrivals.extend([9.5, 9.7, 9.9])
    assert session.observed_rate_hz(10.0) == 0.0  # under a second of arrivals
    session.arrivals.extend([10.5, 11.0])
    assert session.observed_rate_hz(11.0) == pytest.approx(4 / 1.5)
    assert session.observed_rate_hz(30.0) == 0.0  # all older than the window


def test_a_standby_counts_at_its_declared_rate_exactly_like_an_admitted_robot():
    refused_at = first_refused(pi05_gate(400.0))
    admitted = robots(refused_at - 2)
    waiting = Session("standby_arm", "", 30.0, True, opened_at=0.0, standby=True)
    assert not waiting.arrivals and waiting.observed_rate_hz(100.0) == 0.0, (
        "a standby asks nothing yet"
    )
    with_standby = pi05_gate(400.0).report(admitted + [waiting])
    with_robot = pi05_gate(400.0).report(admitted + robots(1, fps=30.0))
    assert with_standby == with_robot
    assert (
        with_standby.headroom_robots == pi05_gate(400.0).report(admitted).headroom_robots - 1 == 0
    )
    # The last place that fits is the standby's: a newcomer that fits beside the robots alone is
    # refused.
    gate = pi05_gate(400.0)
    assert gate.refusal(30.0, True, admitted, "newcomer") is None
    message = gate.refusal(30.0, True, admitted + [waiting], "newcomer")
    assert message is not None and f"with {refused_at} robots" in message
    assert gate.refusal(30.0, True, admitted + [waiting], "standby_arm") is None, (
        "its own re-open counts once"
    )


def test_a_standby_opening_that_would_not_fit_the_budget_is_refused():
    gate = pi05_gate(400.0)
    sessions = SessionRegistry()
    for session in robots(first_refused(gate) - 1):
        sessions.open(session)
    request = OpenRequest(
        "standby_arm",
        SCHEMA_VERSION,
        NAMES,
        6,
        ("observation.images.front",),
        30.0,
        rtc_requested=True,
        standby=True,
    )
    room = ServerLoad(
        ready=True, draining=False, active_sessions=sessions.count(), max_sessions=500
    )
    decision = decide_open(
        request,
        "",
        CAPABILITIES,
        room,
        sessions,
        SETTINGS,
        latency_refusal=lambda open_request, rtc: gate.refusal(
            open_request.fps, rtc, sessions.sessions(), open_request.client_id
        ),
    )
    assert decision.session is None and decision.refusal is Refusal.CAPACITY
    assert "latency_budget_ms 400" in decision.message and sessions.standby_count() == 0
