"""One autotune run, top to bottom: check the pipeline, open the study, measure, tune, report."""

from __future__ import annotations

import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

import torch

from autotune.config.settings import Settings
from autotune.errors import BaselineFailedError, ConfigError, StudyAbortedError
from autotune.knobs import SearchContext
from autotune.measure.environment import default_device, describe_machine, usable_cpu_count
from autotune.pipeline.inspect import inspect_pipeline
from autotune.report import write_reports
from autotune.report.console import format_result, print_summary
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.study.confirm import confirm_fastest
from autotune.study.space import SearchSpace, build_space, check_baseline
from autotune.study.tuner import (
    MeasureFn,
    StopReason,
    TrialEvent,
    ensure_baseline,
    open_study,
    redact_url,
    tune,
)
from autotune.trial.result import TrialRequest, TrialResult
from autotune.trial.runner import ProgressFn, run_repeated


def run(settings: Settings, output_dir: Path, out: TextIO = sys.stdout) -> dict[str, Path]:
    """Tune ``settings.pipeline`` and write the reports into ``output_dir``; returns the files written."""
    device = resolve_device(settings.measure.device)
    ctx = _search_context(settings, device)
    check_baseline(settings.baseline, ctx)
    space = build_space(settings.search, ctx)
    study = open_study(settings.study, _study_meta(settings, device, space))
    print(
        f"autotune: pipeline '{settings.pipeline.name}' on {device}; study '{settings.study.name}' in "
        f"{redact_url(settings.study.storage)}; {space.size} configurations, up to {settings.study.n_trials} trials",
        file=out,
    )

    measure = _trial_runner(settings, device, output_dir / "trials")
    baseline, reused = ensure_baseline(study, settings.baseline, measure)
    print(f"[baseline{', stored' if reused else ''}] {format_result(baseline)}", file=out, flush=True)
    if not baseline.ok:
        raise BaselineFailedError(
            f"the baseline (pipeline.baseline) failed, so there is nothing to tune: {baseline.failure}. "
            f"Log: {output_dir / 'trials' / 'baseline.log'}"
        )

    def show(event: TrialEvent) -> None:
        line = format_result(event.result, baseline.timing.throughput)
        print(f"[trial {event.index}/{event.total} #{event.number}] {line}", file=out, flush=True)

    def show_confirmation(name: str, result: TrialResult) -> None:
        print(f"[{name}] {format_result(result)}", file=out, flush=True)

    stop = StopReason("interrupted", aborted=True)
    try:
        stop = tune(study, space, settings.study, measure, show)
        if not stop.aborted:
            confirm_fastest(study, load_results(study), settings.study.confirm_rounds, measure, show_confirmation)
    finally:
        results = load_results(study)
        summary = summarise(results)
        files = write_reports(results, summary, output_dir)
        print_summary(summary, files, stop.message, out)
    if stop.aborted:
        raise StudyAbortedError(f"tuning stopped early: {stop.message}; the reports cover what was measured")
    return files


def _search_context(settings: Settings, device: str) -> SearchContext:
    facts = inspect_pipeline(settings.pipeline, device)
    return SearchContext(
        device=device,
        cpu_count=usable_cpu_count(),
        bf16_supported=torch.cuda.is_bf16_supported() if device == "cuda" else True,
        dataset_len=facts.dataset_len,
        input_ndim=facts.input_ndim,
        baseline=settings.baseline,
        optimizer_options=facts.optimizer_options,
        batch_policy=settings.batch_policy,
    )


def _trial_runner(settings: Settings, device: str, workdir: Path) -> MeasureFn:
    """Knob values and a trial name in, a TrialResult out: each call runs fresh trial subprocesses."""
    measure, budget = settings.measure, settings.study.memory_budget_mb
    effective = settings.baseline["batch_size"] if settings.batch_policy == "fixed_effective" else None
    study_dir = re.sub(r"[^\w.-]", "_", settings.study.name)
    cache = str(Path(measure.compile_cache_dir) / study_dir) if measure.compile_cache_dir else None

    def run_one(knobs: dict, name: str, on_progress: ProgressFn | None = None) -> TrialResult:
        request = TrialRequest(
            settings.pipeline, knobs, device, measure.plan, measure.memory_interval_s, effective,
            measure.loss_tolerance, cache,
        )  # fmt: skip
        return run_repeated(request, measure.repeats, measure.trial_timeout_s, workdir, name, budget, on_progress)

    return run_one


def resolve_device(requested: str) -> str:
    if requested == "auto":
        return default_device()
    if requested == "cuda" and not torch.cuda.is_available():
        raise ConfigError("measure.device", "cuda was requested but torch.cuda.is_available() is False")
    return requested


def _study_meta(settings: Settings, device: str, space: SearchSpace) -> dict:
    return {
        "pipeline": settings.pipeline.to_dict(),
        "baseline": settings.baseline,
        "batch_policy": settings.batch_policy,
        "objectives": list(settings.study.objectives),
        "device": device,
        "space": space.candidates,
        "measure": {
            **asdict(settings.measure.plan),
            "trial_timeout_s": settings.measure.trial_timeout_s,
            "repeats": settings.measure.repeats,
            "loss_tolerance": settings.measure.loss_tolerance,
        },
        "machine": describe_machine(),
    }
