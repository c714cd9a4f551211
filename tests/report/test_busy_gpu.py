"""A run that shared its GPU with other processes is named in the report's busy-machine section."""

from __future__ import annotations

from dataclasses import replace

from autotune.measure.measurement import SystemReport
from autotune.records import TrialRecord
from autotune.report import write_reports
from autotune.results.model import StudyResults
from autotune.results.summary import summarise
from tests.report.test_reports import sample_results


def test_a_run_beside_another_process_on_its_gpu_is_named_in_the_report(tmp_path):
    results = sample_results()
    record = results.trials[0]
    shared = SystemReport(50.0, [50.0, 50.0], 1.0, gpu_other_processes=2)  # idle cores: only the GPU was shared
    measurement = replace(record.result.measurement, system=shared)
    trials = [TrialRecord(record.label, replace(record.result, measurement=measurement)), *results.trials[1:]]
    study = StudyResults(**{**results.__dict__, "trials": trials})
    markdown = write_reports(study, summarise(study), tmp_path)["report.md"].read_text()
    assert "## Measured on a busy machine" in markdown
    assert "taken by others on average) or computed on its GPU: trial 0 (2 other processes on the GPU)." in markdown
