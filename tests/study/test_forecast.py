"""The forecast of the rest of a tuning run, said after its first search trial."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.recorder import WindowPlan
from autotune.study.clock import RunClock
from autotune.study.forecast import forecast
from tests.conftest import NEUTRAL_KNOBS
from tests.study.test_budget import measured

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
FIRST = {**NEUTRAL_KNOBS, "batch_size": 128, "num_workers": 2, "amp": "bf16"}  # 3 changes


def _clock(budget_s: float | None = None) -> RunClock:
    """A run that measured the baseline in a 3 s process and then its first search trial, ``FIRST``, in an 8 s one
    whose window (10 steps of 0.1 s) is as long as a full window would be: each of its full runs is expected 8 s."""
    clock = RunClock(budget_s=budget_s, plan=WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0))
    clock.count(measured(3.0))
    with clock.stage("search"):
        clock.count(replace(measured(8.0, batch_size=128), knobs=FIRST))
    return clock


def test_the_rest_is_every_search_trial_left_then_each_races_planned_rounds_and_the_profiles():
    clock = _clock()
    changes = 3
    expected = forecast(clock, BASELINE, FIRST, "trial 0", trials_left=7, rounds=3, finalists=3)
    assert expected.trial_s == 8.0, "a search trial as the one measured"
    assert expected.race_round_s == pytest.approx(3.0 + 3 * 8.0), "the baseline, and 3 finalists as slow as it"
    assert expected.trim_round_s == pytest.approx(3.0 + (1 + changes) * 8.0), "itself, each change undone"
    assert expected.profiles_s == pytest.approx(2 * 3.0), "the baseline's and the recommendation's, a run each"
    total = 7 * 8.0 + 3 * (27.0 + 3.0 + (1 + changes) * 8.0) + 6.0
    assert expected.total_s == pytest.approx(total)
    said = expected.said(None)
    assert said.startswith(f"up to about {total / 60:.0f} min more: 7 search trials (~8 s each), the race (3 rounds,")
    assert f"the trim's first race where the winner changes {changes} knobs as trial 0 does (3 rounds" in said
    assert said.endswith("; a race ends sooner once decided; the trim may race again; study.budget_s=SECONDS bounds it")
    assert expected.said(99.6).endswith("study.budget_s leaves 100 s of it")
    assert expected.said(-5.0).endswith("study.budget_s leaves 0 s of it"), "past the budget: nothing left"


def test_a_winner_of_one_change_has_no_trim_and_no_race_has_neither():
    clock = _clock()
    one = {**BASELINE, "batch_size": 128}
    alone = forecast(clock, BASELINE, one, "trial 0", trials_left=1, rounds=3, finalists=1, profiles=False)
    assert alone.trim_round_s == 0.0 and "trim" not in alone.said(None), "a single change is not trimmed"
    assert "; a race ends sooner once decided; study.budget_s" in alone.said(None)
    assert alone.profiles_s == 0.0 and "profiles" not in alone.said(None), "study.diagnose=false"
    assert alone.said(None).startswith("up to about 41 s more: 1 search trial (~8 s each), the race (3 rounds")
    unraced = forecast(clock, BASELINE, FIRST, "trial 0", trials_left=0, rounds=0, finalists=1)
    assert unraced.total_s == pytest.approx(6.0) and unraced.said(None).startswith("up to about 6 s more: 2 profiles")


def test_trials_in_slots_at_once_take_as_long_as_the_slots_longest_queue():
    clock = _clock()
    two = forecast(clock, BASELINE, FIRST, "trial 0", trials_left=7, rounds=0, finalists=3, slots=2, profiles=False)
    assert two.total_s == pytest.approx(4 * 8.0), "7 trials in 2 slots: 4 after one another"
