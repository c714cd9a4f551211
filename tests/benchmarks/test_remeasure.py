import math

import pytest

from benchmarks.remeasure import fastest, ratio_interval, verdict


def test_the_fastest_is_the_highest_geometric_mean_among_configurations_that_never_failed():
    rounds = [
        {"grid1": 100.0, "grid2": 90.0, "tuner": 200.0},
        {"grid1": 100.0, "grid2": 130.0, "tuner": None},
        {"grid1": 100.0, "grid2": 95.0, "tuner": 210.0},
    ]
    # grid2's arithmetic mean (105) beats grid1's (100); its geometric mean (~104.0) does too, so it wins; the tuner's
    # pick is fastest whenever it ran, but it failed once
    assert fastest(rounds, ["grid1", "grid2", "tuner"]) == "grid2"
    rounds[1]["grid2"] = 110.0  # geometric mean of 90, 110, 95 is ~98.0: under grid1's 100
    assert fastest(rounds, ["grid1", "grid2", "tuner"]) == "grid1"
    assert fastest([], ["grid1"]) is None


def test_the_paired_ratio_interval_is_a_t_interval_on_log_ratios_of_rounds_where_both_ran():
    rounds = [{"a": 110.0, "b": 100.0}, {"a": 99.0, "b": 90.0}, {"a": None, "b": 95.0}, {"a": 121.0, "b": 110.0}]
    interval = ratio_interval(rounds, "a", "b")
    assert interval["n"] == 3 and interval["geomean"] == pytest.approx(1.1)
    assert interval["low"] == pytest.approx(1.1) and interval["high"] == pytest.approx(1.1), "no spread: no width"
    rounds[3]["a"] = 132.0  # ratios 1.1, 1.1, 1.2
    interval = ratio_interval(rounds, "a", "b")
    assert interval["low"] < interval["geomean"] < interval["high"]
    assert math.log(interval["high"] / interval["geomean"]) == pytest.approx(
        math.log(interval["geomean"] / interval["low"])
    )
    assert ratio_interval(rounds[:2] + [{"a": None, "b": 1.0}], "a", "b")["n"] == 2
    assert ratio_interval(rounds[:1], "a", "b") is None


def test_the_verdict_is_met_missed_or_unresolved_by_where_the_interval_lies():
    assert verdict({"low": 0.98, "high": 1.2}, 0.97) == "met"
    assert verdict({"low": 0.80, "high": 0.96}, 0.97) == "missed"
    assert verdict({"low": 0.90, "high": 1.05}, 0.97) == "unresolved"
    assert verdict(None, 0.97) is None
