"""A configuration (or the probe) the budget's cap ended is left for a later run once: where a run of it the cap ended
is already stored on the machine, the new one is stored as the timeout it is, a fault, saying how to measure it; a
budget always smaller than what it needs (it hangs) would otherwise leave it for later in every run, for ever."""

from __future__ import annotations

from dataclasses import replace

from optuna.trial import TrialState

from autotune.measure.environment import this_machine_id
from autotune.records import PROBE_ATTR, config_key, on_machine
from autotune.study.probe_model import probe_once, stored_probe
from autotune.study.start import open_study
from autotune.study.tuner import counted_trials, ensure_baseline, tune
from autotune.trial.result import FailureKind, TrialResult
from tests.conftest import fake_measurement
from tests.study.test_budget_capped_trial import capped
from tests.study.test_tuner import BASELINE, META, SPACE, FakeMeasure, settings

FIX = "a larger study.budget_s (at least measure.trial_timeout_s beside the baseline's time) or a smaller"


class Hangs(FakeMeasure):
    """The first configuration searched (kept in ``hung``, across runs) never finishes in time: the budget's cap ends
    each of its runs; the others are measured."""

    def __init__(self, hung: list[str]):
        super().__init__()
        self.hung = hung

    def __call__(self, knobs, name, on_progress=None):
        self.calls.append((name, dict(knobs)))
        self.hung[:] = self.hung or [config_key(knobs)]
        return capped(knobs) if config_key(knobs) in self.hung else TrialResult(knobs, fake_measurement(100.0))


def one_run(study, tmp_path, hung, **more):
    """A tuning run whose budget its first process spends (as a hung one does); its events and what it measured."""
    measure, events = Hangs(hung), []
    budget = settings(tmp_path, n_trials=3, budget_s=300.0, **more)
    tune(study, SPACE, budget, measure, events.append, affords=lambda done, knobs: not measure.calls)
    return events, measure.calls


def test_a_configuration_the_budget_ended_twice_is_stored_as_a_timeout_naming_the_fix(tmp_path):
    study, hung = open_study(settings(tmp_path), META), []
    ensure_baseline(study, BASELINE, FakeMeasure())
    first, _ = one_run(study, tmp_path, hung)
    assert [e.not_measured for e in first] == ["left for a later run: study.budget_s=300 ran out while it ran"]
    (second,), calls = one_run(study, tmp_path, hung)
    assert [config_key(calls[0][1])] == hung, "the later run measures it first"
    failure = second.result.failure
    assert failure.kind is FailureKind.TIMEOUT and FIX in failure.message, "a fault, its fix named"
    assert counted_trials(study) == 1 and study.trials[-1].state is TrialState.FAIL
    _, calls = one_run(study, tmp_path, hung)
    assert [config_key(calls[0][1])] != hung, "stored: not left for later again, nor measured again"


def test_a_configuration_the_budget_ended_twice_counts_as_a_failure_in_a_row(tmp_path):
    study, hung = open_study(settings(tmp_path), META), []
    ensure_baseline(study, BASELINE, FakeMeasure())
    one_run(study, tmp_path, hung, max_consecutive_failures=1)
    measure = Hangs(hung)
    budget = settings(tmp_path, n_trials=3, budget_s=300.0, max_consecutive_failures=1)
    stop = tune(study, SPACE, budget, measure, lambda e: None, affords=lambda done, knobs: True)
    assert stop.aborted and len(measure.calls) == 1, "a timeout, as before the budget's cap was told apart"


def test_a_probe_the_budget_ended_twice_is_stored_failed_for_good_naming_the_fix(tmp_path):
    study, runs = open_study(settings(tmp_path), META), []

    def run_probe(plan):
        runs.append(plan)
        return capped(BASELINE)

    first = probe_once(study, SPACE, BASELINE, run_probe, 100.0)
    assert first.retry and FIX not in first.failure, "left for a later run, once"
    second = probe_once(open_study(settings(tmp_path), META), SPACE, BASELINE, run_probe, 100.0)
    assert not second.retry and FIX in second.failure and stored_probe(study) == second
    assert probe_once(open_study(settings(tmp_path), META), SPACE, BASELINE, run_probe, 100.0) == second
    assert len(runs) == 2, "not probed a third time"


def test_a_probe_left_for_later_by_drift_and_then_capped_is_left_for_later(tmp_path):
    """Only a probe the cap ended counts as capped before: one a drift left for later (no time to probe again) does
    not."""
    study = open_study(settings(tmp_path), META)
    drifted = probe_once(study, SPACE, BASELINE, lambda plan: capped(BASELINE), 100.0)
    as_drift = replace(drifted, failure="its timings drifted and study.budget_s left no time to probe again: ...")
    study.set_user_attr(on_machine(PROBE_ATTR, this_machine_id()), as_drift.to_dict())
    again = probe_once(study, SPACE, BASELINE, lambda plan: capped(BASELINE), 100.0)
    assert again.retry and FIX not in again.failure
