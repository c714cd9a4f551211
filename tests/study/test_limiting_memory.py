"""Every memory decision uses the limiting memory: the GPU's (CUDA peak reserved) on CUDA, the host process tree's on
CPU; study.host_memory_budget_mb bounds the host tree on any device. Fake measurements with CUDA fields, no GPU."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest
from optuna.trial import TrialState

from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.measure.memory import MemoryBudget
from autotune.records import DUPLICATE_ATTR, TrialRecord
from autotune.report.recommended import recommendation
from autotune.results.summary import summarise
from autotune.study.start import open_study
from autotune.study.trial_outcome import within_budget
from autotune.study.tuner import ensure_baseline, tune
from autotune.trial.result import FailureKind, TrialResult
from autotune.trial.runner import _BudgetWatch
from tests.conftest import fake_measurement, tiny_config
from tests.results.test_summary import BASELINE as SUMMARY_BASELINE
from tests.results.test_summary import results_with
from tests.study.test_tuner import BASELINE, META, SPACE, settings


def measured(host_mb: float, gpu_reserved_mb: float | None = None, throughput: float = 100.0):
    """A fake measurement with the host tree's peak ``host_mb``; with ``gpu_reserved_mb``, one on cuda:0."""
    measurement = fake_measurement(throughput, peak_mb=host_mb)
    if gpu_reserved_mb is None:
        return measurement
    memory = replace(
        measurement.memory, cuda_peak_allocated_mb=gpu_reserved_mb * 0.8, cuda_peak_reserved_mb=gpu_reserved_mb
    )
    return replace(measurement, device="cuda:0", memory=memory)


def result(host_mb: float, gpu_reserved_mb: float | None = None, throughput: float = 100.0, **knobs) -> TrialResult:
    return TrialResult(knobs={**BASELINE, **knobs}, measurement=measured(host_mb, gpu_reserved_mb, throughput))


def test_the_peak_every_decision_uses_is_the_gpus_on_cuda_and_the_host_trees_on_cpu():
    on_gpu, on_cpu = result(3000, gpu_reserved_mb=500), result(3000)
    assert (on_gpu.peak_memory_mb, on_gpu.host_peak_memory_mb, on_gpu.measurement.memory.limiting) == (500, 3000, "gpu")
    assert (on_cpu.peak_memory_mb, on_cpu.host_peak_memory_mb, on_cpu.measurement.memory.limiting) == (
        3000,
        3000,
        "host",
    )


def test_the_memory_budget_bounds_the_gpu_on_cuda_and_the_host_tree_on_cpu(tmp_path):
    budget = settings(tmp_path, memory_budget_mb=1000)
    assert within_budget(result(3000, gpu_reserved_mb=500), budget).ok, "the host tree is not the limit on a GPU"
    over_gpu = within_budget(result(300, gpu_reserved_mb=1500), budget)
    assert over_gpu.failure.kind is FailureKind.OUT_OF_MEMORY and over_gpu.measurement is not None
    assert over_gpu.failure.message == (
        "peak 1500 MiB of GPU memory (CUDA reserved) is over study.memory_budget_mb=1000: infeasible"
    )
    over_host = within_budget(result(3000), budget)
    assert over_host.failure.message == (
        "peak 3000 MiB of host memory (process tree) is over study.memory_budget_mb=1000: infeasible"
    )


def test_the_host_memory_budget_bounds_the_host_tree_beside_a_gpu(tmp_path):
    both = settings(tmp_path, memory_budget_mb=1000, host_memory_budget_mb=2000)
    assert within_budget(result(1900, gpu_reserved_mb=900), both).ok
    over = within_budget(result(3000, gpu_reserved_mb=1500), both)
    assert over.failure.message == (
        "peak 1500 MiB of GPU memory (CUDA reserved) is over study.memory_budget_mb=1000; "
        "peak 3000 MiB of host memory (process tree) is over study.host_memory_budget_mb=2000: infeasible"
    )


def test_the_objective_and_the_constraint_use_the_gpu_peak_on_cuda(tmp_path):
    objectives = ("throughput", "peak_memory")
    chosen = settings(tmp_path, n_trials=3, objectives=objectives, memory_budget_mb=1000)
    study = open_study(chosen, META)
    ensure_baseline(study, BASELINE, lambda knobs, name, progress: result(5000, gpu_reserved_mb=400))

    def on_gpu(knobs, name, on_progress):  # big batches need more GPU memory, and less host memory
        big = knobs["batch_size"] == 32
        return TrialResult(knobs=knobs, measurement=measured(4000 if big else 5000, 1200 if big else 400))

    tune(study, SPACE, chosen, on_gpu, print)
    trials = [t for t in study.get_trials(states=(TrialState.COMPLETE,)) if DUPLICATE_ATTR not in t.user_attrs]
    assert trials
    for trial in trials:
        big = trial.params.get("batch_size") == 32
        assert trial.values[1] == (1200 if big else 400)
        assert trial.constraints["memory_over_budget_mb"] == (200 if big else -600)


def test_ties_are_broken_by_the_gpu_peak_and_recommended_yaml_reports_it():
    def record(label, host_mb, gpu_mb, **knobs):
        knobs = {**SUMMARY_BASELINE, **knobs}
        return TrialRecord(label, TrialResult(knobs, measurement=measured(host_mb, gpu_mb, throughput=120.0)))

    results = results_with(
        record("0", host_mb=100, gpu_mb=900, num_workers=1), record("1", host_mb=900, gpu_mb=100, batch_size=32)
    )
    results = replace(results, device="cuda:0", baseline=TrialRecord("baseline", result(200, 300)))
    summary = summarise(results)
    assert summary.recommended.label == "1", "tied in throughput and changes: the lower GPU peak wins"
    measured_figures = recommendation(results, summary).measured
    assert (measured_figures.peak_memory_mb, measured_figures.baseline_peak_memory_mb) == (100, 300)


def test_the_running_watch_holds_the_host_tree_to_the_budget_of_its_device():
    both = settings("unused", memory_budget_mb=1000, host_memory_budget_mb=4000)
    assert both.watched_budget("cuda:0") == MemoryBudget("study.host_memory_budget_mb", 4000)
    assert both.watched_budget("cuda") == MemoryBudget("study.host_memory_budget_mb", 4000)
    assert both.watched_budget("cpu") == MemoryBudget("study.memory_budget_mb", 1000), "the tighter one on a CPU"
    assert settings("unused", memory_budget_mb=1000).watched_budget("cuda") is None, "a GPU's is judged on results"
    assert settings("unused", host_memory_budget_mb=500).watched_budget("cpu").key == "study.host_memory_budget_mb"


def test_the_running_watch_names_the_key_of_its_budget():
    over = _BudgetWatch(os.getpid(), MemoryBudget("study.host_memory_budget_mb", 1.0)).over()
    assert over.kind is FailureKind.OUT_OF_MEMORY
    assert over.message.endswith("over study.host_memory_budget_mb=1; stopped")


def test_the_host_memory_budget_key_is_read_and_checked():
    config = tiny_config(study={"host_memory_budget_mb": 2048})
    assert load_settings(config, "tiny").study.host_memory_budget_mb == 2048
    with pytest.raises(ConfigError, match=r"study\.host_memory_budget_mb: expected a number > 0 or null"):
        load_settings(tiny_config(study={"host_memory_budget_mb": -5}), "tiny")
