"""The rounds an interval of paired ratios needs are one number (MIN_ROUNDS), and the quiet rounds a gain needs left
before slowed ones are left out of it another (MIN_QUIET_ROUNDS): two quiet rounds bound nothing."""

from __future__ import annotations

from autotune.measure import stats


def test_the_interval_reads_min_rounds(monkeypatch):
    assert stats.ratio_interval([1.1, 1.2]) is not None
    monkeypatch.setattr(stats, "MIN_ROUNDS", 3)
    assert stats.ratio_interval([1.1, 1.2]) is None and stats.ratio_interval([1.1, 1.2, 1.15]) is not None


def test_a_slowed_round_is_left_out_only_where_three_quiet_rounds_and_half_are_left():
    assert stats.quiet_rounds({1: 1.1, 2: 1.2, 3: 1.5}, {3}) == {1: 1.1, 2: 1.2, 3: 1.5}, "two quiet are too few"
    assert stats.quiet_rounds({1: 1.1, 2: 1.2, 3: 1.15, 4: 1.5}, {4}) == {1: 1.1, 2: 1.2, 3: 1.15}
    five = {1: 1.1, 2: 1.2, 3: 1.15, 4: 1.5, 5: 1.4}
    assert stats.quiet_rounds(five, {4, 5}) == {1: 1.1, 2: 1.2, 3: 1.15}
    assert stats.quiet_rounds({**five, 6: 1.3}, {4, 5, 6}) == {1: 1.1, 2: 1.2, 3: 1.15}, "half are left"
    assert stats.quiet_rounds({**five, 6: 1.3, 7: 1.3}, {4, 5, 6, 7}) == {**five, 6: 1.3, 7: 1.3}, "most were slowed"


def test_the_quiet_rounds_read_min_quiet_rounds(monkeypatch):
    monkeypatch.setattr(stats, "MIN_QUIET_ROUNDS", 2)
    assert stats.quiet_rounds({1: 1.1, 2: 1.2, 3: 1.5}, {3}) == {1: 1.1, 2: 1.2}
