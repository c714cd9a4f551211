"""Validated settings as frozen dataclasses; library code takes these, never a DictConfig."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autotune.measure.recorder import WindowPlan
from autotune.pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class StudySettings:
    """Where the Optuna study lives and how much tuning it may do.

    A trial whose process tree uses more than ``memory_budget_mb`` is stopped as out of memory;
    ``max_consecutive_failures`` failed trials in a row stop the study. The fastest trial is measured
    against the baseline again ``confirm_rounds`` times, interleaved, before it is recommended.
    """

    name: str
    storage: str
    n_trials: int
    timeout_s: float | None
    seed: int
    memory_budget_mb: float | None = None
    max_consecutive_failures: int = 5
    confirm_rounds: int = 3


@dataclass(frozen=True)
class MeasureSettings:
    """How each trial is measured. ``device`` is "auto", "cpu" or "cuda"; ``repeats`` is the number of
    fresh processes each configuration is measured in (the median is kept)."""

    device: str
    plan: WindowPlan
    trial_timeout_s: float
    memory_interval_s: float
    repeats: int = 1


@dataclass(frozen=True)
class Settings:
    """Everything one autotune run needs. ``search`` maps knob name to candidates, None = derived."""

    pipeline: PipelineSpec
    baseline: dict[str, Any]
    search: dict[str, list[Any] | None]
    study: StudySettings
    measure: MeasureSettings
