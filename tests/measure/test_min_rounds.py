"""The rounds an interval of paired ratios needs are one number (MIN_ROUNDS): the interval and the rounds a gain is
stated from read it."""

from __future__ import annotations

from autotune.measure import stats


def test_the_interval_and_the_quiet_rounds_read_min_rounds(monkeypatch):
    assert stats.ratio_interval([1.1, 1.2]) is not None
    assert stats.quiet_rounds({1: 1.1, 2: 1.2, 3: 1.5}, {3}) == {1: 1.1, 2: 1.2}
    monkeypatch.setattr(stats, "MIN_ROUNDS", 3)
    assert stats.ratio_interval([1.1, 1.2]) is None and stats.ratio_interval([1.1, 1.2, 1.15]) is not None
    assert stats.quiet_rounds({1: 1.1, 2: 1.2, 3: 1.5}, {3}) == {1: 1.1, 2: 1.2, 3: 1.5}, "two quiet are too few"
    assert stats.quiet_rounds({1: 1.1, 2: 1.2, 3: 1.15, 4: 1.5}, {4}) == {1: 1.1, 2: 1.2, 3: 1.15}
