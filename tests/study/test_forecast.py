"""The forecast of the rest of a tuning run, said after its first search trial."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.recorder import WindowPlan
from autotune.results.finalist import Finalist
from autotune.study.clock import RunClock
from autotune.study.forecast import forecast
from autotune.study.trim import first_race
from tests.conftest import NEUTRAL_KNOBS
from tests.study.test_budget import measured

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
FIRST = {**NEUTRAL_KNOBS, "batch_size": 128, "num_workers": 2, "amp": "bf16"}  # 3 changes: 3 variants


def _clock() -> RunClock:
    """A run that measured the baseline in a 3 s process and then its first search trial, ``FIRST``, in an 8 s one
    whose window (10 steps of 0.1 s) is as long as a full window would be: each of its full runs is expected 8 s."""
    clock = RunClock(plan=WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0))
    clock.count(measured(3.0))
    with clock.stage("search"):
        clock.count(replace(measured(8.0, batch_size=128), knobs=FIRST))
    return clock


def _trim_round(knobs: dict) -> list[dict]:
    return first_race(Finalist("trial 0", knobs, 0, None), BASELINE, "free", "cpu")


def test_the_rest_is_every_search_trial_left_then_each_races_planned_rounds_and_the_profiles():
    clock = _clock()
    race_round_s = clock.round_s([BASELINE], unknown=3)
    expected = forecast(
        clock,
        first="trial 0",
        trials_left=7,
        rounds=3,
        race_round_s=race_round_s,
        trim_round=_trim_round(FIRST),
        slots=1,
        profiles=True,
    )
    assert race_round_s == pytest.approx(3.0 + 3 * 8.0), "the baseline, and 3 finalists as slow as the trial"
    assert expected.trial_s == 8.0, "a search trial as the one measured"
    assert (expected.variants, expected.trim_round_s) == (3, pytest.approx(3.0 + 4 * 8.0)), "the trial, each undone"
    assert expected.profiles_s == pytest.approx(2 * 3.0), "the baseline's and the recommendation's, a run each"
    total = 7 * 8.0 + 3 * (27.0 + 35.0) + 6.0
    assert expected.total_s == pytest.approx(total)
    said = expected.said(None)
    assert said.startswith(f"up to about {total / 60:.0f} min more: 7 search trials (~8 s each), the race (3 rounds,")
    assert (
        "the trim's first race, where the winner changes what trial 0 does (3 variants, 3 rounds, ~35 s each)" in said
    )
    assert said.endswith(
        "; the race ends at its verdict and a variant that falls behind leaves early; the trim may race again, beyond "
        "this; study.budget_s=SECONDS bounds it"
    )
    assert expected.said(99.6).endswith("study.budget_s leaves 100 s of it")
    assert expected.said(-5.0).endswith("study.budget_s leaves 0 s of it"), "past the budget: nothing left"


def test_a_winner_of_one_change_has_no_trim_and_a_run_with_nothing_left_says_nothing():
    clock = _clock()
    one = {**BASELINE, "batch_size": 128}
    assert _trim_round(one) == [], "a single change is not trimmed"
    alone = forecast(
        clock, first="trial 0", trials_left=1, rounds=3, race_round_s=11.0, trim_round=[], slots=1, profiles=False
    )
    assert (alone.trim_round_s, alone.profiles_s) == (0.0, 0.0)
    assert alone.said(None) == (
        "up to about 41 s more: 1 search trial (~8 s each), the race (3 rounds, ~11 s each); a finalist that falls "
        "behind leaves early; study.budget_s=SECONDS bounds it"
    )
    unraced = forecast(
        clock,
        first="trial 0",
        trials_left=0,
        rounds=0,
        race_round_s=11.0,
        trim_round=_trim_round(FIRST),
        slots=1,
        profiles=True,
    )
    assert unraced.total_s == pytest.approx(6.0), "study.confirm_rounds=0: neither the race nor the trim"
    assert unraced.said(None) == "up to about 6 s more: 2 profiles (~3 s each); study.budget_s=SECONDS bounds it"
    nothing = forecast(
        clock, first="trial 0", trials_left=0, rounds=0, race_round_s=0.0, trim_round=[], slots=1, profiles=False
    )
    assert nothing.said(None) == "", "the last trial, no race, no profiles: no line"


def test_trials_in_slots_at_once_take_as_long_as_the_slots_longest_queue():
    two = forecast(
        _clock(), first="trial 0", trials_left=7, rounds=0, race_round_s=0.0, trim_round=[], slots=2, profiles=False
    )
    assert two.total_s == pytest.approx(4 * 8.0), "7 trials in 2 slots: 4 after one another"
