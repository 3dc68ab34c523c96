"""The flood rule and the aggregated audit of refusals on arrival (server/arrival_guard.py): plain
Python, a fake clock, real audit records collected in a list."""

import pytest

from lerobot_ros.server.sessions.flood_guard import (
    FULL_LINES_PER_WINDOW,
    ArrivalGuard,
    FloodPolicy,
    Gate,
)

POLICY = FloodPolicy(
    refusals_per_s=5,
    close_after_s=2.0,
    backoff_initial_s=5.0,
    backoff_max_s=12.0,
    audit_window_s=10.0,
)


def guard(policy=POLICY):
    lines = []
    return ArrivalGuard(policy, lines.append), lines


def flood(g, client, start, seconds, per_s, kind="mac"):
    """``per_s`` observations a second for ``seconds``: the gate first, refused when checked;
    returns the gate counts."""
    gates = {Gate.CHECK: 0, Gate.DROP: 0}
    for i in range(int(seconds * per_s)):
        now = start + i / per_s
        verdict = g.gate(client, now)
        gates[verdict] += 1
        if verdict is Gate.CHECK:
            g.refused(
                client, kind, f"{kind} refused", now, {"outcome": "refused_on_arrival", "i": i}
            )
    return gates


def test_a_session_over_its_budget_is_checked_at_most_budget_times_a_second_then_dropped_unchecked():  # noqa: E501 - the test's id names what it checks
    g, _ = guard()
    gates = flood(g, "attacker", 100.0, 1.0, 200)
    assert gates == {Gate.CHECK: 5, Gate.DROP: 195}
    assert g.report(101.0)[0].refused == 200, "dropped ones count too"


def test_a_sustained_flood_is_marked_for_closure_then_its_client_id_is_refused_for_a_growing_backoff():  # noqa: E501 - the test's id names what it checks
    g, lines = guard()
    flood(g, "attacker", 100.0, 1.0, 50)
    assert g.due_closures() == [], "one second over the budget is not sustained"
    flood(g, "attacker", 101.0, 1.5, 50)
    ((client, reason),) = g.due_closures()
    assert client == "attacker" and "refused at 5/s or more for 3 s in a row" in reason
    assert g.gate("attacker", 102.6) is Gate.DROP, (
        "a session marked for closure is not checked any more"
    )
    assert g.closed("attacker", reason, 103.0) == 5.0
    assert g.due_closures() == []
    g.refused(
        "attacker",
        "no_session",
        "client 'attacker' has no open session",
        103.5,
        {"outcome": "late"},
    )
    assert g.report(104.0)[0].last_reason.startswith(
        "session closed: flood: observations refused at 5/s"
    )
    refusal = g.reopen_refusal("attacker", 104.0)
    assert (
        "closed for flooding (observations refused at 5/s" in refusal
        and "again in 4.0 s" in refusal
    )
    assert g.reopen_refusal("attacker", 108.1) is None
    assert g.report(104.0)[0].reopen_refused_for_s == pytest.approx(4.0)
    # Second and third closures: 10 s, then capped at 12 s.
    g.session_opened("attacker")
    flood(g, "attacker", 110.0, 3.5, 50)
    assert g.closed("attacker", "again", 114.0) == 10.0
    g.session_opened("attacker")
    flood(g, "attacker", 130.0, 3.5, 50)
    assert g.closed("attacker", "again", 134.0) == 12.0


def test_a_client_under_its_budget_is_never_closed_and_others_are_not_affected():
    g, _ = guard()
    flood(g, "buggy", 100.0, 10.0, 4)  # a robot with a wrong key at 4 Hz: refused, never throttled
    assert g.due_closures() == []
    assert g.gate("buggy", 110.0) is Gate.CHECK
    flood(g, "attacker", 100.0, 3.5, 100)
    assert [client for client, _ in g.due_closures()] == ["attacker"]
    assert g.gate("honest", 103.0) is Gate.CHECK and g.reopen_refusal("honest", 103.0) is None


def test_superseded_observations_count_against_the_same_budget():
    g, _ = guard()
    for i in range(400):  # valid MACs at 100/s: each supersedes a waiting one
        now = 100.0 + i / 100
        if g.gate("fast", now) is Gate.CHECK:
            g.strike("fast", "superseded: more than one request in flight", now)
    ((client, reason),) = g.due_closures()
    assert client == "fast" and "(last: superseded" in reason
    assert g.report(104.0) == [], "the report counts refusals on arrival only"


def test_the_audit_gets_a_few_full_lines_per_client_and_reason_then_one_summary_per_window():
    g, lines = guard(FloodPolicy(refusals_per_s=1000, audit_window_s=10.0))
    for i in range(50):
        g.refused(
            "arm",
            "seq",
            f"seq {i} replays",
            100.0 + i * 0.1,
            {"outcome": "refused_on_arrival", "seq": i},
        )
    g.refused(
        "arm", "mac", "MAC does not verify", 101.0, {"outcome": "refused_on_arrival", "seq": 99}
    )
    full = [line for line in lines if line["outcome"] == "refused_on_arrival"]
    assert [line["seq"] for line in full] == list(range(FULL_LINES_PER_WINDOW)) + [99]
    g.flush(109.0)
    assert not any(line["outcome"] == "refused_on_arrival_summary" for line in lines), (
        "the window is still open"
    )
    g.flush(111.0)
    (summary,) = [line for line in lines if line["outcome"] == "refused_on_arrival_summary"]
    assert (
        summary["client"] == "arm"
        and summary["session"] == ""
        and summary["reason"] == "seq"
        and summary["count"] == 50
    )
    assert summary["first_error"] == "seq 0 replays" and summary["last_error"] == "seq 49 replays"
    # The next refusal opens a new window with its own full line.
    g.refused("arm", "seq", "seq 50 replays", 112.0, {"outcome": "refused_on_arrival", "seq": 50})
    assert lines[-1]["seq"] == 50


def test_the_report_keeps_counts_and_last_reason_per_client_and_forgets_quiet_ones():
    g, _ = guard()
    g.refused("a", "epoch", "epoch 3 is not this session's epoch 2", 100.0, {"outcome": "x"})
    g.refused("b", "mac", "Observation MAC does not verify", 100.0, {"outcome": "x"})
    g.refused("b", "seq", "seq 1 replays", 100.5, {"outcome": "x"})
    report = {entry.client_id: entry for entry in g.report(101.0)}
    assert (
        report["a"].refused == 1
        and report["a"].last_reason == "epoch: epoch 3 is not this session's epoch 2"
    )
    assert report["b"].refused == 2 and report["b"].last_reason == "seq: seq 1 replays"
    g.flush(500.0, live_clients={"a"})
    assert [entry.client_id for entry in g.report(500.0)] == ["a"], "a live session's entry stays"


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (FloodPolicy(refusals_per_s=0), "refusals_per_s must be >= 1, got 0"),
        (
            FloodPolicy(backoff_initial_s=30.0, backoff_max_s=10.0),
            "0 < initial <= max, got 30.0 and 10.0",
        ),
        (FloodPolicy(close_after_s=0.0), "must be > 0, got 0.0"),
    ],
)
def test_a_bad_policy_is_refused_saying_what_was_expected(policy, expected):
    with pytest.raises(ValueError, match=expected.replace(".", r"\.").replace("(", r"\(")):
        ArrivalGuard(policy, print)
