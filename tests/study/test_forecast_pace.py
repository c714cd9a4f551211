"""The forecast's pace: only a search trial that may race (its run beat the baseline's) says how long a finalist, or
the winner the trim races, runs."""

from __future__ import annotations

import pytest

from autotune import app
from autotune.config.load import load_settings
from autotune.measure.recorder import WindowPlan
from autotune.study.clock import RunClock
from autotune.study.forecast import UNKNOWN_WINNER_CHANGES
from autotune.study.trial_outcome import TrialEvent
from tests.conftest import tiny_config
from tests.study.test_forecast import BASELINE, BASELINE_RUN, FIRST, clock_after, foretold, trial_run

COMPILED = {**FIRST, "compile": "default"}  # 4 changes


def test_a_trial_slower_than_the_baseline_neither_paces_the_race_nor_stands_in_for_the_winner():
    # A compiled trial whose 80 s process read a tenth of the baseline's throughput: no finalist, no winner.
    slow = trial_run(COMPILED, 80.0, 10.0)
    expected = foretold(slow, trials_left=7, rounds=3, finalists=3)
    assert expected.race_round_s == pytest.approx(4 * 3.0), "the baseline and 3 finalists, each at its 3 s run"
    assert (expected.variants, expected.trim_round_s) == (UNKNOWN_WINNER_CHANGES, pytest.approx(4 * 3.0)), (
        "a winner of the fewest changes the trim races, and a variant for each, at the baseline's run"
    )
    said = expected.said(None)
    assert "trial 0" not in said, "a trial that cannot race stands in for nothing"
    assert (
        "the race (3 rounds, ~12 s each), the trim's first race, where the winner changes 2 knobs, the fewest the "
        "trim races (2 variants, 3 rounds, ~12 s each); no trial has beaten the baseline yet: each finalist and the "
        "winner counted at its run time;"
    ) in said


def test_a_trial_only_as_fast_as_the_baseline_cannot_race_either():
    even = foretold(trial_run(FIRST, 8.0, 100.0), rounds=3, finalists=3)  # the baseline's 100 samples/s
    assert (even.race_round_s, even.first) == (pytest.approx(4 * 3.0), ""), "a finalist must beat the baseline"


def test_a_trial_that_beats_the_baseline_paces_the_race_by_the_slower_of_its_run_and_the_baseline_s():
    compiled = foretold(trial_run(COMPILED, 50.0, 150.0), rounds=3, finalists=3)
    assert compiled.race_round_s == pytest.approx(3.0 + 3 * 50.0), "a compiled finalist-to-be, its compile each run"
    assert compiled.first == "trial 0" and "where the winner changes what trial 0 does" in compiled.said(None)
    quick = foretold(trial_run({**BASELINE, "batch_size": 128, "amp": "bf16"}, 2.0, 150.0), rounds=3, finalists=3)
    assert quick.race_round_s == pytest.approx(4 * 3.0), "finalists-to-be no quicker than the baseline's run"
    assert quick.trim_round_s == pytest.approx(3.0 + 2.0 + 2 * 3.0), "the trial, its 2 variants as the slower run"


def test_the_run_tells_the_forecast_the_baseline_and_its_first_trial_so_that_a_slow_one_paces_nothing():
    settings = load_settings(tiny_config(study={"n_trials": 8, "confirm_rounds": 3, "diagnose": False}), "tiny")
    slow = trial_run(COMPILED, 80.0, 10.0)
    said: list[str] = []
    foretell = app._foretelling(settings, clock_after(slow), BASELINE_RUN, 1, "cpu", said.append)
    foretell(TrialEvent(number=0, index=1, total=8, result=slow))
    assert len(said) == 1 and said[0].startswith("[time] up to about "), said
    assert "the race (3 rounds, ~12 s each)" in said[0] and "trial 0" not in said[0], said


def test_what_the_budget_keeps_back_for_the_race_is_priced_by_the_same_rule_as_the_forecast():
    # The search's keep-back for the race (``app._race_round_s``) and the [time] line read one rule: a slow compiled
    # trial that did not beat the baseline prices no finalist (it kept back 4 x 80 s a round), one that did does.
    settings = load_settings(tiny_config(study={"n_trials": 8, "confirm_rounds": 3, "diagnose": False}), "tiny")
    slow = clock_after(trial_run(COMPILED, 80.0, 10.0))
    assert app._race_round_s(settings, slow, BASELINE_RUN, 8) == pytest.approx(4 * 3.0)
    raced = clock_after(trial_run(COMPILED, 50.0, 150.0))
    assert app._race_round_s(settings, raced, BASELINE_RUN, 8) == pytest.approx(3.0 + 3 * 50.0)


def test_a_compiled_first_trial_prices_the_search_trials_left_by_the_baselines_run_not_by_its_compile():
    # A trial that turns on a costly knob is priced by such trials (``RunClock.trial_s``); the search trials left,
    # not proposed yet, by the others: here, none yet, so by the baseline's run (its 80 s made 7 trials 9 minutes).
    expected = foretold(trial_run(COMPILED, 80.0, 150.0), trials_left=7)
    assert expected.trial_s == pytest.approx(3.0), "the baseline's 3 s run, not the compiled trial's 80 s"
    assert clock_after(trial_run(COMPILED, 80.0, 150.0)).trial_s(COMPILED) == pytest.approx(80.0)


def test_a_compiled_trial_does_not_price_a_plain_proposal_by_its_batch_either():
    # The tuner's clock has a screen plan: a plain proposal is priced by the median plain search trial's step time at
    # its batch (``_screened_at_batch_s``), whose warm-up a compile would fill.
    clock = RunClock(plan=WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0), screen_plan=WindowPlan())
    clock.count(BASELINE_RUN)
    with clock.stage("search"):
        clock.count(trial_run(COMPILED, 80.0, 150.0))
    plain = {**BASELINE, "batch_size": 128}
    assert clock.trial_s(plain) == pytest.approx(clock.screen_s()) == pytest.approx(3.0)
