"""Ranking and recommendation over stored results."""

from __future__ import annotations

import pytest

from autotune.results.model import StudyResults, TrialRecord
from autotune.results.summary import summarise
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.study.test_tuner import BASELINE, fake_result


def results_with(*trials: TrialRecord, baseline_throughput=100.0) -> StudyResults:
    return StudyResults(
        study_name="s",
        pipeline="p",
        device="cpu",
        machine={},
        space={},
        measure={},
        baseline=TrialRecord("baseline", fake_result(BASELINE, baseline_throughput)),
        trials=list(trials),
    )


def trial(label, throughput, **knobs):
    return TrialRecord(label, fake_result({**BASELINE, **knobs}, throughput))


def failed(label, **knobs):
    return TrialRecord(
        label, TrialResult({**BASELINE, **knobs}, failure=Failure(FailureKind.TIMEOUT, "timeout after 5 s"))
    )


def test_the_fastest_trial_is_recommended_and_failures_rank_last():
    summary = summarise(results_with(trial("0", 90.0), failed("1"), trial("2", 150.0, batch_size=32)))
    assert [r.label for r in summary.ranked] == ["2", "baseline", "0", "1"]
    assert summary.recommended.label == "2"
    assert summary.speedup == pytest.approx(1.5)
    assert summary.changed_knobs() == {"batch_size": (16, 32)}
    assert not summary.is_baseline


def test_the_baseline_is_kept_when_nothing_beats_it():
    summary = summarise(results_with(trial("0", 80.0), trial("1", 100.0, batch_size=32)))
    assert summary.is_baseline and summary.speedup == 1.0
    assert summary.changed_knobs() == {}


def test_a_summary_needs_a_measured_baseline():
    results = results_with()
    broken = StudyResults(**{**results.__dict__, "baseline": None})
    with pytest.raises(ValueError):
        summarise(broken)
