"""Optuna's importance of each knob, reported only from as many completed trials as it needs to mean something."""

from __future__ import annotations

import optuna

from autotune.results.model import IMPORTANCE_MIN_TRIALS, knob_importance
from benchmarks.importance_model import SCENARIOS, study_of


def test_importance_is_left_out_below_its_minimum_of_completed_trials():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = study_of(SCENARIOS["data-bound"], IMPORTANCE_MIN_TRIALS, run_sd=0.08, seed=0)
    trials = study.trials
    failed = optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, params=trials[0].params,
                                       distributions=trials[0].distributions)  # fmt: skip
    assert knob_importance(study, [*trials[1:], failed]) == {}, "a failed trial is not one of them"
    importance = knob_importance(study, trials)
    assert set(importance) == set(trials[0].params) and abs(sum(importance.values()) - 1.0) < 1e-9


def test_a_knob_that_matters_this_much_comes_first_from_the_minimum_in_most_studies():
    """The rule's reason (docs/benchmarks.md section 11 at 60 studies): here 10 studies, with a margin."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    firsts = 0
    for seed in range(10):
        study = study_of(SCENARIOS["data-bound"], IMPORTANCE_MIN_TRIALS, 0.08, seed)
        importance = knob_importance(study, study.trials)
        firsts += max(importance, key=importance.get) == "num_workers"
    assert firsts >= 6
