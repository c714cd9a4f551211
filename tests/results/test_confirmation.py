"""When a re-measurement confirms a trial against the baseline."""

from __future__ import annotations

import pytest

from autotune.results.confirmation import Confirmation


def confirmation(candidate, baseline, failure=None):
    return Confirmation("3", {"batch_size": 64}, list(baseline), list(candidate), failure)


def test_a_win_in_every_round_with_enough_gain_is_confirmed():
    result = confirmation(candidate=[110, 108, 112], baseline=[100, 101, 99])
    assert result.confirmed and result.speedup == pytest.approx(110 / 100)


def test_one_lost_round_is_not_confirmed():
    assert not confirmation(candidate=[120, 99, 121], baseline=[100, 100, 100]).confirmed


def test_a_gain_within_two_percent_is_not_confirmed():
    assert not confirmation(candidate=[101, 101.5, 101], baseline=[100, 100, 100]).confirmed


def test_a_failed_re_measurement_is_not_confirmed():
    result = confirmation(candidate=[120], baseline=[100], failure="confirm-2-trial-3: timeout: timeout after 5 s")
    assert not result.confirmed and "failed" in result.describe()


def test_round_trip():
    result = confirmation(candidate=[110.0], baseline=[100.0])
    assert Confirmation.from_dict(result.to_dict()) == result
