"""A search trial's end: measured, its result stored on the trial and held to the memory budgets
(``measure_trial``, ``within_budget``), or answered without a measurement (ruled out by a failure: ``not_measured``;
left for a later run by study.budget_s: ``left_for_later``); what Optuna is told of it (``Outcome``), read back from
the study too (``known_outcomes``); and how the search reports it (``TrialEvent``). The search that asks for the
trials is ``autotune/study/tuner.py``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.trial import TrialState

from autotune.config.settings import StudySettings
from autotune.records import (
    BASELINE_LABEL,
    CAPPED_ATTR,
    CONFIG_ATTR,
    INTERRUPTED_ATTR,
    MACHINE_ATTR,
    NOT_MEASURED_ATTR,
    RESULT_ATTR,
    config_key,
    metric_attrs,
)
from autotune.study.clock import ended_by_budget
from autotune.study.pruner import SlowerThanBestPruner
from autotune.study.space import KnownFailure, ruled_out, why_ruled_out
from autotune.trial.result import Failure, FailureKind, TrialResult
from autotune.trial.runner import ProgressFn

# The trials that measured a configuration on a machine, with their results (``records.measured_trials``).
Measured = list[tuple[optuna.trial.FrozenTrial, TrialResult]]


# Knob values, a trial name and an optional progress callback (for pruning) in, a result out.
RunFn = Callable[[dict[str, Any], str, ProgressFn | None], TrialResult]


@dataclass(frozen=True)
class TrialEvent:
    """A finished tuning trial, for progress display. ``index`` counts from 1 to ``total``. ``result`` is None where
    the trial was dropped, unmeasured or its result lost, and ``dropped`` says why; or where its configuration
    (``knobs``) was ruled out unmeasured or left for a later run, and ``not_measured`` says why."""

    number: int
    index: int
    total: int
    result: TrialResult | None
    dropped: str | None = None
    knobs: dict[str, Any] | None = None
    not_measured: str | None = None


def not_measured(study: optuna.Study, trial: optuna.Trial, key: str, found: KnownFailure) -> None:
    """Tell Optuna that ``trial`` of configuration ``key`` is pruned without a measurement, as ``found`` shows it
    would fail (``ruled_out``); the reason is kept on the trial."""
    trial.set_user_attr(CONFIG_ATTR, key)
    trial.set_user_attr(NOT_MEASURED_ATTR, why_ruled_out(found))
    told(study, trial, state=TrialState.PRUNED)


class EndedByBudget(Exception):
    """Raised by ``measure_trial`` where what study.budget_s had left ended the trial's process
    (``clock.ended_by_budget``): the trial is left for a later run (``left_for_later``)."""


def left_for_later(study: optuna.Study, trial: optuna.Trial, key: str) -> None:
    """Fail ``trial`` of configuration ``key`` unmeasured, as interrupted: the machine owes it (``_owed``), and a
    later run of the study, with the time for it, measures it first."""
    trial.set_user_attr(CONFIG_ATTR, key)
    trial.set_user_attr(INTERRUPTED_ATTR, True)
    told(study, trial, state=TrialState.FAIL)


def within_budget(result: TrialResult, settings: StudySettings) -> TrialResult:
    """``result``, marked infeasible (keeping its measurement) if a peak of its memory is over its budget."""
    over = [said for said, excess in _budget_excesses(result, settings) if excess > 0] if result.ok else []
    if not over:
        return result
    return replace(result, failure=Failure(FailureKind.OUT_OF_MEMORY, "; ".join(over) + ": infeasible"))


_MEMORY_NAMES = {"gpu": "GPU memory (CUDA reserved)", "host": "host memory (process tree)"}


def _budget_excesses(result: TrialResult, settings: StudySettings) -> list[tuple[str, float]]:
    """(what it says, MiB over) for each memory budget set, of a measured ``result``: study.memory_budget_mb bounds the
    limiting memory (the GPU's on CUDA, the host process tree's on CPU), study.host_memory_budget_mb the host tree.
    A negative excess is room left."""
    memory = result.measurement.memory
    checks = [
        ("study.memory_budget_mb", settings.memory_budget_mb, memory.limiting, memory.limiting_peak_mb),
        ("study.host_memory_budget_mb", settings.host_memory_budget_mb, "host", memory.peak_mb),
    ]
    return [
        (f"peak {peak:.0f} MiB of {_MEMORY_NAMES[which]} is over {key}={budget:g}", peak - budget)
        for key, budget, which, peak in checks
        if budget is not None
    ]


@dataclass(frozen=True)
class Outcome:
    """What Optuna is told about a measured configuration: its state, objective values and constraints
    (a constraint above zero makes the trial infeasible: over the memory budget, or a wrong loss)."""

    label: int | str
    state: TrialState
    values: list[float] | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    pruned_at: float | None = None  # a pruned trial's last throughput reading

    @property
    def feasible_throughput(self) -> float | None:
        if self.values is None or any(c > 0 for c in self.constraints.values()):
            return None
        return self.values[0]


def _outcome(label: int | str, result: TrialResult, settings: StudySettings, pruned_at: float | None = None) -> Outcome:
    if result.measurement is None:
        pruned = result.failure.kind is FailureKind.PRUNED
        return Outcome(label, TrialState.PRUNED, pruned_at=pruned_at) if pruned else Outcome(label, TrialState.FAIL)
    values = [result.timing.throughput]
    if settings.multi_objective:
        values.append(result.peak_memory_mb)
    constraints = {
        "memory_over_budget_mb": max((excess for _, excess in _budget_excesses(result, settings)), default=0.0),
        "loss_incorrect": 1.0 if result.failure is not None and result.failure.kind is FailureKind.INCORRECT else 0.0,
    }
    return Outcome(label, TrialState.COMPLETE, values, constraints)


def measure_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    knobs: dict[str, Any],
    run: RunFn,
    settings: StudySettings,
    pruner: SlowerThanBestPruner | None,
) -> tuple[TrialResult, Outcome]:
    """Measure ``knobs`` as ``trial``, store the result on it and tell Optuna; a trial stopped by an exception
    (Ctrl-C; PlacementRefusedError, its process refusing its slot's cores: the run's, not the configuration's) is
    marked interrupted, so that a later run measures it first (``_owed``). UpdateFinishedTrialError where another
    tuner took the trial for dead and failed it meanwhile: its result is lost, and its configuration is measured
    again. EndedByBudget where what study.budget_s had left ended its process: no timeout of the configuration's, so
    it is left for a later run (``left_for_later``), how long it ran kept on the trial (CAPPED_ATTR), rather than
    stored as failed, never measured again. Only a run that can give it more than it ran measures it again
    (``Proposal.capped_s``): each run of it gets more time than the last, until one ends it, measured or at
    measure.trial_timeout_s (a timeout of its own, a fault)."""
    last_reading: list[float] = []

    def on_progress(steps: int, throughput: float) -> str | None:
        trial.report(throughput, steps)
        last_reading[:] = [throughput]
        return pruner.reason(throughput) if pruner.slower(steps, throughput) else None

    try:
        result = run(knobs, f"trial-{trial.number}", on_progress if pruner else None)
    except BaseException:
        with contextlib.suppress(UpdateFinishedTrialError):
            trial.set_user_attr(INTERRUPTED_ATTR, True)
            told(study, trial, state=TrialState.FAIL)
        raise
    if ended_by_budget(result):
        trial.set_user_attr(CAPPED_ATTR, result.wall_s)  # all the budget had left as it started: its processes' time
        left_for_later(study, trial, config_key(knobs))
        raise EndedByBudget
    result = within_budget(result, settings)
    outcome = _outcome(trial.number, result, settings, last_reading[0] if last_reading else None)
    trial.set_user_attr(RESULT_ATTR, result.to_dict())
    for key, value in metric_attrs(result).items():
        trial.set_user_attr(key, value)
    tell(study, trial, outcome)
    return result, outcome


def tell(study: optuna.Study, trial: optuna.Trial, outcome: Outcome) -> None:
    if outcome.values is None:
        told(study, trial, state=outcome.state)
        return
    for name, value in outcome.constraints.items():
        trial.set_constraint(name, value)
    told(study, trial, outcome.values)


def told(
    study: optuna.Study, trial: optuna.Trial, values: list[float] | None = None, state: TrialState | None = None
) -> None:
    """``study.tell``, raising UpdateFinishedTrialError, as a write to it does, where ``trial`` is finished already:
    another tuner took it for dead and failed it (Optuna's tell raises ValueError then, as for a wrong value)."""
    try:
        study.tell(trial, values, state=state)
    except ValueError:
        if not study._storage.get_trial(trial._trial_id).state.is_finished():
            raise
        raise UpdateFinishedTrialError(f"trial {trial.number} was failed by another tuner") from None


def known_outcomes(
    baseline: TrialResult | None,
    trials: list[optuna.trial.FrozenTrial],
    measured: Measured,
    settings: StudySettings,
    machine: str,
    failed: list[KnownFailure],
) -> dict[str, Outcome]:
    """Configurations measured on ``machine`` (its ``baseline``, where stored, and ``measured``), and those of
    ``trials`` not measured as what ``failed`` still rules out (``ruled_out``) → what Optuna was told about them."""
    known: dict[str, Outcome] = {}
    if baseline is not None:
        known[config_key(baseline.knobs)] = _outcome(BASELINE_LABEL, baseline, settings)
    for trial, result in measured:
        readings = trial.intermediate_values
        pruned_at = readings[max(readings)] if readings else None
        known.setdefault(config_key(result.knobs), _outcome(trial.number, result, settings, pruned_at))
    for trial in trials:
        kept = trial.user_attrs
        if trial.state is TrialState.PRUNED and NOT_MEASURED_ATTR in kept and kept.get(MACHINE_ATTR) == machine:
            if ruled_out(json.loads(kept[CONFIG_ATTR]), failed):  # a failure in a worker no longer rules out once
                known.setdefault(kept[CONFIG_ATTR], Outcome(trial.number, TrialState.PRUNED))  # workers ran
    return known
