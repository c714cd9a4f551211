"""Where the machine's speed did not hold through a study (the baseline's medians in its races of two rounds or more
further apart than UNSTEADY_BASELINE), the headline leads with that none of its figures stands, with the readings,
then says what it read; recommended.yaml and report.json record it, the terminal gives no training advice from it,
and mode=check refuses it as a reference. Where it held, nothing is said."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
import yaml

from autotune.report import write_reports
from autotune.report.console import print_summary
from autotune.report.headline import headline
from autotune.results.advice import batch_advice
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import UNSTEADY_BASELINE, summarise
from tests.report.test_reports import sample_results
from tests.study.test_tuner import fake_result

NOTE = (
    "None of this stands: the machine's speed did not hold through the study, the baseline reading 100.0 samples/s by "
    "the median of the finalists' race, 32.0 samples/s by the median of trim race 1 (3.1x apart). Run it again with "
    "nothing else running (a new study.name measures everything afresh)."
)


def results_with_races(trim_baseline: list[float], winner_runs=(110.0, 112.0, 111.0)) -> StudyResults:
    """Trial 0 (batch 32) raced against the baseline at 100 samples/s, then its trim's race with the baseline's runs
    ``trim_baseline``."""
    base = sample_results()
    knobs = next(r for r in base.trials if r.label == "0").result.knobs
    confirmation = Confirmation([100.0, 98.0, 102.0], [Finalist("0", knobs, 1, 100.0, list(winner_runs))])
    trim = Confirmation(trim_baseline, [Finalist("0", knobs, 1, 100.0, list(winner_runs)[: len(trim_baseline)])])
    return StudyResults(**{**base.__dict__, "confirmation": confirmation, "trim": [trim]})


def test_a_baseline_whose_race_medians_lie_far_apart_leads_the_headline_with_none_of_the_study_standing(tmp_path):
    results = results_with_races([30.0, 35.0, 32.0])
    summary = summarise(results)
    assert summary.baseline_readings == {"the finalists' race": 100.0, "trim race 1": 32.0}
    assert summary.unsteady == pytest.approx(100 / 32)
    said = headline(summary)
    assert said.lead == NOTE and said.rest.startswith("What it read: Recommended (trial 0): "), said
    files = write_reports(results, summary, tmp_path)
    report = json.loads(files["report.json"].read_text())
    assert report["unsteady"] == pytest.approx(100 / 32) and report["baseline_readings"]["trim race 1"] == 32.0
    assert NOTE in files["report.md"].read_text()
    throughput = yaml.safe_load(files["recommended.yaml"].read_text())["throughput"]
    assert throughput["method"].endswith(f". {NOTE}") and throughput["unsteady"] == pytest.approx(3.12)
    out = io.StringIO()
    print_summary(summary, {}, "done", out, training=batch_advice(results, summary))
    assert NOTE in out.getvalue() and "Training: " not in out.getvalue(), "no advice from figures that do not stand"


def test_a_baseline_whose_race_medians_agree_within_the_bound_or_a_single_round_says_nothing_of_it():
    high = 100.0 / UNSTEADY_BASELINE * 1.01
    summary = summarise(results_with_races([high, high, high]))
    assert summary.unsteady is None and "None of this stands" not in str(headline(summary))
    one_round = summarise(results_with_races([30.0]))
    assert one_round.baseline_readings == {"the finalists' race": 100.0}, "a single run is no median to read"
    assert one_round.unsteady is None


def test_the_baseline_s_first_run_far_from_its_races_does_not_count():
    # A resumed study's first run may be of another day: the races' pairing cancels that drift.
    results = results_with_races([99.0, 101.0, 100.0])
    slow_first = replace(results.baseline, result=fake_result(results.baseline.result.knobs, 30.0))
    summary = summarise(replace(results, baseline=slow_first))
    assert summary.unsteady is None and "None of this stands" not in str(headline(summary))
