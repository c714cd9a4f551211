"""A search trial or a probe whose process what study.budget_s had left ended (``clock.ended_by_budget``) is left for
a later run, not stored as the configuration's failure, how long it ran kept: a later run with more budget measures
it (``test_budget_capped_twice.py``)."""

from __future__ import annotations

from dataclasses import replace

from optuna.trial import TrialState

from autotune.measure.environment import this_machine_id
from autotune.records import CAPPED_ATTR, INTERRUPTED_ATTR, PROBE_ATTR, ProbeRecord, on_machine
from autotune.report.study_document import build_document
from autotune.results.summary import summarise
from autotune.study.clock import RunClock, ended_by_budget
from autotune.study.probe_model import probe_once, stored_probe
from autotune.study.search_state import counted_trials
from autotune.study.start import open_study
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import fake_measurement
from tests.report.test_reports import sample_results
from tests.study.test_tuner import BASELINE, META, SPACE, FakeMeasure, settings


def capped(knobs, ran_s: float = 4.5) -> TrialResult:
    """A run of ``knobs`` the budget's cap on its timeout ended after ``ran_s``, marked so by
    ``RunClock.as_ended_by_budget`` (study.budget_s=60, measure.trial_timeout_s=600)."""
    timed_out = TrialResult(knobs, failure=Failure(FailureKind.TIMEOUT, f"timeout after {ran_s:g} s"), wall_s=ran_s)
    result = RunClock(budget_s=60.0).as_ended_by_budget(timed_out, ran_s, 600.0)
    assert ended_by_budget(result)
    return result


class CappedFirst(FakeMeasure):
    """The first search trial's process ended by the budget's cap; the rest measured, none failing."""

    def __call__(self, knobs, name, on_progress=None):
        self.calls.append((name, dict(knobs)))
        return capped(knobs) if len(self.calls) == 1 else TrialResult(knobs, measurement=fake_measurement(100.0))


def test_a_trial_the_budget_ended_is_left_for_a_later_run_which_measures_it_first(tmp_path):
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    measure, events = CappedFirst(), []
    spent = lambda done, proposal: not measure.calls  # noqa: E731  (the capped process spent what the budget had left)
    budget = settings(tmp_path, n_trials=3, budget_s=60.0)
    stop = tune(study, SPACE, budget, measure, events.append, affords=spent)
    assert stop.message.startswith("study.budget_s=60: the next search trial does not fit") and not stop.aborted
    (left,) = study.trials
    assert left.state is TrialState.FAIL and left.user_attrs[INTERRUPTED_ATTR], "owed to the machine, as interrupted"
    assert counted_trials(study) == 0, "no trial measured its configuration"
    assert left.user_attrs[CAPPED_ATTR] == 4.5, "how long it ran, all the budget had left: it needs more"
    said = "left for a later run with more time for it: study.budget_s=60 ran out while it ran"
    assert [e.not_measured for e in events] == [said]
    later = FakeMeasure()
    tune(study, SPACE, settings(tmp_path, n_trials=3), later, lambda e: None)  # with time for it
    assert later.calls[0][1] == measure.calls[0][1] and counted_trials(study) == 3, "measured first"


def test_a_trial_the_budget_ended_is_no_fault_of_its_configuration(tmp_path):
    study = open_study(settings(tmp_path), META)
    ensure_baseline(study, BASELINE, FakeMeasure())
    budget = settings(tmp_path, n_trials=2, budget_s=60.0, max_consecutive_failures=1)
    stop = tune(study, SPACE, budget, CappedFirst(), lambda e: None, affords=lambda done, proposal: True)
    assert not stop.aborted and counted_trials(study) == 2, "not a failure in a row (study.max_consecutive_failures)"


def test_a_probe_the_budget_ended_is_stored_failed_for_now_and_probed_anew_by_a_later_run(tmp_path):
    study = open_study(settings(tmp_path), META)
    record = probe_once(study, SPACE, BASELINE, lambda plan: capped(BASELINE), 100.0)
    assert not record.ok and record.retry and record.capped_s == 4.5, "failed for now: the budget ran out"
    stored = ProbeRecord.from_dict(study.user_attrs[on_machine(PROBE_ATTR, this_machine_id())])
    assert stored.retry and stored_probe(study) is None, "a later run probes anew"


def test_the_report_says_a_later_run_probes_anew_where_the_budget_ended_the_probe(tmp_path):
    study = open_study(settings(tmp_path), META)
    record = probe_once(study, SPACE, BASELINE, lambda plan: capped(BASELINE), 100.0)
    results = replace(sample_results(), probe=record)
    assert probe_said(results).endswith("any search trial went on without it. A later run probes anew.")
    kept = replace(record, retry=False)  # a probe that failed by what it read is not run again
    assert probe_said(replace(results, probe=kept)).endswith("any search trial went on without it.")


def probe_said(results) -> str:
    """What the report says of ``results``' probe."""
    (section,) = [s for s in build_document(results, summarise(results)).sections if "probe" in s.heading]
    return section.paragraphs[0]


def test_a_probe_capped_on_its_second_run_keeps_that_runs_time_not_both(tmp_path):
    # The first run drifted (1 s), the second the budget's cap ended after 4.5 s: 4.5 s is all the budget had left.
    from tests.study.test_probe_model import drifting

    first = drifting(100.0)
    runs = iter([first, lambda plan: capped(BASELINE)])
    study = open_study(settings(tmp_path), META)
    record = probe_once(study, SPACE, BASELINE, lambda plan: next(runs)(plan), 90.0)
    assert record.retry and record.capped_s == 4.5 and record.wall_s == 5.5, "the cap is the capped run's own time"
