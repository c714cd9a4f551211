"""The forecast of the rest of a tuning run, said after its first search trial."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.measure.recorder import WindowPlan
from autotune.records import BASELINE_LABEL, TrialRecord
from autotune.study.clock import RunClock
from autotune.study.forecast import Forecast, forecast
from autotune.trial.result import TrialResult
from tests.conftest import NEUTRAL_KNOBS
from tests.study.test_budget import measured

BASELINE = {**NEUTRAL_KNOBS, "batch_size": 16}
FIRST = {**NEUTRAL_KNOBS, "batch_size": 128, "num_workers": 2, "amp": "bf16"}  # 3 changes: 3 variants
BASELINE_RUN = measured(3.0)  # 100 samples/s


def trial_run(knobs: dict, wall_s: float, throughput: float) -> TrialResult:
    """A search trial of ``knobs`` in a ``wall_s`` process whose window (10 steps of 0.1 s) is as long as a full
    window would be, reading ``throughput`` samples/s (the baseline's: 100)."""
    result = replace(measured(wall_s, batch_size=knobs["batch_size"]), knobs=knobs)
    timing = replace(result.measurement.timing, throughput=throughput)
    return replace(result, measurement=replace(result.measurement, timing=timing))


def clock_after(first: TrialResult) -> RunClock:
    """A run that measured the baseline in a 3 s process (``BASELINE_RUN``) and then its first search trial,
    ``first``."""
    clock = RunClock(plan=WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0))
    clock.count(BASELINE_RUN)
    with clock.stage("search"):
        clock.count(first)
    return clock


def foretold(first: TrialResult, **steps) -> Forecast:
    """The forecast after ``first``, trial 0, the first search trial measured (``clock_after``), of the ``steps``
    given (``forecast``'s keywords: trials_left, rounds, finalists, slots, profiles; by default none of them)."""
    plan = {"trials_left": 0, "rounds": 0, "finalists": 0, "slots": 1, "profiles": False, **steps}
    baseline, trial = TrialRecord(BASELINE_LABEL, BASELINE_RUN), TrialRecord("0", first)
    return forecast(clock_after(first), baseline=baseline, first=trial, batch_policy="free", device="cpu", **plan)


FASTER = trial_run(FIRST, 8.0, 150.0)  # beats the baseline: a finalist-to-be, each of its full runs expected 8 s


def test_the_rest_is_every_search_trial_left_then_each_races_planned_rounds_and_the_profiles():
    expected = foretold(FASTER, trials_left=7, rounds=3, finalists=3, profiles=True)
    assert expected.race_round_s == pytest.approx(3.0 + 3 * 8.0), "the baseline, and 3 finalists as slow as the trial"
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
    one = trial_run({**BASELINE, "batch_size": 128}, 8.0, 150.0)
    alone = foretold(one, trials_left=1, rounds=3, finalists=1)
    assert (alone.trim_round_s, alone.profiles_s) == (0.0, 0.0), "a single change is not trimmed"
    assert alone.said(None) == (
        "up to about 41 s more: 1 search trial (~8 s each), the race (3 rounds, ~11 s each); a finalist that falls "
        "behind leaves early; study.budget_s=SECONDS bounds it"
    )
    unraced = foretold(FASTER, finalists=3, profiles=True)
    assert unraced.total_s == pytest.approx(6.0), "study.confirm_rounds=0: neither the race nor the trim"
    assert unraced.said(None) == "up to about 6 s more: 2 profiles (~3 s each); study.budget_s=SECONDS bounds it"
    assert foretold(FASTER).said(None) == "", "the last trial, no race, no profiles: no line"


def test_trials_in_slots_at_once_take_as_long_as_the_slots_longest_queue():
    two = foretold(FASTER, trials_left=7, slots=2)
    assert two.total_s == pytest.approx(4 * 8.0), "7 trials in 2 slots: 4 after one another"
