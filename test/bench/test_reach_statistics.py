"""The reach benchmarks' statistics: Wilson intervals and the paired (same cubes) success
difference."""

from __future__ import annotations

import pytest

from bench.reach_runs import episode_successes, paired_difference, wilson_interval


def test_wilson_interval_matches_the_textbook_value():
    # 36 of 50: the published Wilson 95 % interval is 0.583-0.824.
    low, high = wilson_interval(36, 50)
    assert low == pytest.approx(0.583, abs=0.001) and high == pytest.approx(0.825, abs=0.001)


def test_wilson_interval_stays_inside_zero_and_one_at_the_extremes():
    low, high = wilson_interval(0, 100)
    assert low == 0.0 and 0.0 < high < 0.05
    low, high = wilson_interval(100, 100)
    assert 0.95 < low < 1.0 and high == 1.0


def test_paired_difference_counts_only_discordant_episodes():
    first = [True] * 60 + [True] * 10 + [False] * 2 + [False] * 28
    second = [True] * 60 + [False] * 10 + [True] * 2 + [False] * 28
    d = paired_difference(first, second)
    assert (d["only_first"], d["only_second"], d["episodes"]) == (10, 2, 100)
    assert d["difference"] == pytest.approx(0.08)
    assert d["low"] < 0.08 < d["high"]
    # McNemar exact: two-sided binomial tail of 2 or fewer in 12 fair coin flips.
    assert d["p_value"] == pytest.approx(2 * (1 + 12 + 66) / 4096)


def test_identical_runs_differ_by_nothing_with_p_one():
    outcomes = [True, False, True, True]
    d = paired_difference(outcomes, outcomes)
    assert d["difference"] == 0.0 and d["p_value"] == 1.0 and d["low"] == d["high"] == 0.0


def test_episode_successes_orders_by_episode():
    summary = {
        "outcomes": [
            {"episode": 2, "outcome": "TIMEOUT"},
            {"episode": 0, "outcome": "SUCCESS"},
            {"episode": 1, "outcome": "SUCCESS"},
        ]
    }
    assert episode_successes(summary) == [True, True, False]
