"""Where the machine's speed did not hold through a study (the baseline's first run and its races' medians further
apart than UNSTEADY_BASELINE), the headline says that none of its figures stands, with the readings, and report.json
records them; where it held, nothing is said."""

from __future__ import annotations

import json

import pytest
import yaml

from autotune.report import write_reports
from autotune.report.headline import headline
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import UNSTEADY_BASELINE, summarise
from tests.report.test_reports import sample_results


def results_with_race(baseline_runs: list[float], winner_runs: list[float]) -> StudyResults:
    confirmation = Confirmation(baseline_runs, [Finalist("0", {}, 1, 100.0, winner_runs)])
    return StudyResults(**{**sample_results().__dict__, "confirmation": confirmation})


def test_a_baseline_read_far_apart_by_its_first_run_and_its_race_says_none_of_the_study_stands(tmp_path):
    results = results_with_race([30.0, 35.0, 32.0], [110.0, 112.0, 111.0])  # the first run read 100
    summary = summarise(results)
    assert summary.baseline_readings == {"its first run": 100.0, "the finalists' race": 32.0}
    assert summary.unsteady == pytest.approx(100 / 32)
    said = str(headline(summary))
    assert said.endswith(
        "None of this stands: the machine's speed did not hold through the study, the baseline reading 100.0 "
        "samples/s in its first run, 32.0 samples/s by the median of the finalists' race (3.1x apart). Run it again "
        "with nothing else running (a new study.name measures everything afresh)."
    ), said
    files = write_reports(results, summary, tmp_path)
    report = json.loads(files["report.json"].read_text())
    assert report["unsteady"] == pytest.approx(100 / 32) and report["baseline_readings"]["the finalists' race"] == 32
    assert "None of this stands" in files["report.md"].read_text()
    method = yaml.safe_load(files["recommended.yaml"].read_text())["throughput"]["method"]
    assert method.endswith(
        "(3.1x apart). Run it again with nothing else running (a new study.name measures everything afresh)."
    )


def test_a_baseline_whose_readings_agree_within_the_bound_says_nothing_of_it(tmp_path):
    high = 100.0 / UNSTEADY_BASELINE * 1.01
    summary = summarise(results_with_race([high, high, high], [110.0, 112.0, 111.0]))
    assert summary.unsteady is None and "None of this stands" not in str(headline(summary))
    kept = summarise(results_with_race([30.0, 35.0, 32.0], [31.0, 30.0, 33.0]))
    assert kept.is_baseline and "None of this stands" in str(headline(kept)), "a baseline kept stands on it too"
