"""A report of a run on a GPU: a run that shared its GPU with other processes is named in its busy-machine section,
and its method says how long warm-up lasted there."""

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
    assert "its run: trial 0: 2 other processes on the GPU." in markdown


def test_the_method_says_a_gpu_run_warmed_up_for_at_least_its_minimum_time(tmp_path):
    results = sample_results()
    markdown = write_reports(results, summarise(results), tmp_path / "cpu")["report.md"].read_text()
    assert "(8 to 60 steps; the warm-up steps counted" in markdown, "a CPU has no minimum warm-up time"
    on_gpu = StudyResults(**{**results.__dict__, "device": "cuda:1"})
    markdown = write_reports(on_gpu, summarise(on_gpu), tmp_path / "gpu")["report.md"].read_text()
    assert "(8 to 60 steps and at least 1 s; the warm-up steps counted" in markdown
