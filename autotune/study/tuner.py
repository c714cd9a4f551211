"""The Optuna study: the baseline first, then proposed trials; every result is stored in the study.

The study is the record of truth: reports are rendered from what is stored here, and running
the same command again resumes it.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import optuna
from optuna.trial import TrialState

from autotune.config.settings import StudySettings
from autotune.errors import StudyMismatchError
from autotune.knobs import KNOBS
from autotune.records import (
    BASELINE_ATTR,
    BASELINE_LABEL,
    DUPLICATE_ATTR,
    INTERRUPTED_ATTR,
    MEASURED_STATES,
    META_ATTR,
    NOT_MEASURED_ATTR,
    PREDICTED_ATTR,
    PROBE_ATTR,
    RESULT_ATTR,
    OutOfMemory,
    ProbeRecord,
    config_key,
    metric_attrs,
)
from autotune.study.pruner import SlowerThanBestPruner
from autotune.study.space import SearchSpace, out_of_memory_bound
from autotune.study.storage import create_study, opening
from autotune.trial.result import Failure, FailureKind, TrialResult
from autotune.trial.runner import ProgressFn

_DIRECTIONS = {"throughput": "maximize", "peak_memory": "minimize"}

# Knob values, a trial name and an optional progress callback (for pruning) in, a result out.
RunFn = Callable[[dict[str, Any], str, ProgressFn | None], TrialResult]
# Proposals of already measured configurations in a row after which the sampler is taken to have converged.
_MAX_REPEATED_PROPOSALS = 100


@dataclass(frozen=True)
class Observation:
    """A measured configuration, for model the search: its knobs and throughput (a pruned trial's reading
    when it was stopped); ``feasible`` is False when it cannot be recommended (over the memory budget, wrong
    loss) though its speed is real."""

    knobs: dict[str, Any]
    throughput: float
    feasible: bool = True


@dataclass(frozen=True)
class Proposal:
    """The next configuration to measure, and its predicted throughput (None where unknown)."""

    knobs: dict[str, Any]
    predicted: float | None = None


# What was measured so far, the keys of every configuration tried and what ran out of memory in; the next proposal
# out, or None when nothing left is worth measuring.
ProposeFn = Callable[[list[Observation], set[str], list[OutOfMemory]], Proposal | None]


@dataclass(frozen=True)
class TrialEvent:
    """A finished tuning trial, for progress display. ``index`` counts from 1 to ``total``."""

    number: int
    index: int
    total: int
    result: TrialResult


def open_study(settings: StudySettings, meta: dict[str, Any]) -> optuna.Study:
    """Create the study, or load it if it exists with the same settings (a resume).

    ``meta`` describes what is tuned (pipeline, baseline, space, measurement); a stored study
    with a different description is refused rather than mixed with this one. The sampler is
    multivariate TPE with conditional groups, since knobs interact and some apply only given others.
    A storage that cannot be opened, or fails before this returns, is a ConfigError naming study.storage and the
    cause (``autotune/study/storage.py``); a fault later raises StorageFaultError.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # "group" is experimental
        sampler = optuna.samplers.TPESampler(
            seed=settings.seed, n_startup_trials=_startup_trials(settings.n_trials), multivariate=True, group=True
        )
    with opening(settings.storage):  # a storage fault before the run starts refuses it
        study = create_study(
            settings.storage,
            study_name=settings.name,
            sampler=sampler,
            directions=[_DIRECTIONS[objective] for objective in settings.objectives],
            load_if_exists=True,
        )
        _adopt(study, meta)
    return study


def _adopt(study: optuna.Study, meta: dict[str, Any]) -> None:
    """Store ``meta`` in a new study; refuse a stored one made with other settings; fail what a killed run left."""
    fingerprint = _fingerprint(meta)
    stored = study.user_attrs.get(META_ATTR)
    if stored is None:
        study.set_user_attr(META_ATTR, {**meta, "fingerprint": fingerprint})
    elif stored.get("fingerprint") != fingerprint:
        raise StudyMismatchError(
            f"study.name: study '{study.study_name}' in the storage was created with a different pipeline, "
            "baseline, search space, objectives or measurement; pass study.name=NEW_NAME to start another study"
        )
    _fail_interrupted_trials(study)


def ensure_baseline(study: optuna.Study, knobs: dict[str, Any], run: RunFn) -> tuple[TrialResult, bool]:
    """The stored baseline result, or a new measurement of it. Returns (result, reused)."""
    stored = study.user_attrs.get(BASELINE_ATTR)
    if stored is not None:
        return TrialResult.from_dict(stored), True
    result = run(knobs, BASELINE_LABEL, None)
    if result.ok:
        study.set_user_attr(BASELINE_ATTR, result.to_dict())
    return result, False


@dataclass(frozen=True)
class StopReason:
    """Why tuning stopped; ``aborted`` when it stopped because something is wrong."""

    message: str
    aborted: bool = False


def tune(
    study: optuna.Study,
    space: SearchSpace,
    settings: StudySettings,
    run: RunFn,
    on_trial: Callable[[TrialEvent], None],
    propose: ProposeFn | None = None,
) -> StopReason:
    """Run trials until the study holds ``settings.n_trials`` measured configurations.

    With ``propose`` (the probe's guide), each trial measures the configuration it proposes and tuning stops
    once it proposes none; without, Optuna's sampler proposes. A configuration measured before (the baseline
    included) is not measured again: the proposal is answered from the stored result and does not count as a
    trial. Tuning also stops at ``settings.timeout_s``, when the space is exhausted, and, aborted, after
    ``settings.max_consecutive_failures`` failed trials in a row (pruned, out-of-memory and incorrect trials are
    verdicts on their configuration, not failures: ``FailureKind.is_fault``). A configuration that needs no less
    memory than one that ran out (in the probe or a trial: ``space.needs_no_less_memory``) is not measured: Optuna
    is told it is pruned, with the reason, and it does not count as a trial either.
    """
    n_trials, timeout_s = settings.n_trials, settings.timeout_s
    deadline = time.monotonic() + timeout_s if timeout_s is not None else float("inf")
    known = _known_outcomes(study, settings)
    ran_out = _out_of_memory(study)
    pruner = _pruner(settings, known)
    study.pruner = pruner or optuna.pruners.NopPruner()
    repeats = failures_in_a_row = 0
    while (done := counted_trials(study)) < n_trials:
        if _exhausted(space, known, ran_out):
            too_big = " or need no less memory than one that ran out" if ran_out else ""
            return StopReason(f"all {space.size} configurations of the search space are measured{too_big}")
        if time.monotonic() >= deadline:
            return StopReason(f"study.timeout_s={timeout_s:g} reached")
        if repeats >= _MAX_REPEATED_PROPOSALS:
            return StopReason("the sampler keeps proposing measured configurations")
        # Trials already waiting (an interrupted one, on resume) go first; without a guide, the sampler proposes.
        proposal = None
        if propose is not None and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            proposal = propose(_observations(known), set(known), ran_out)
            if proposal is None:
                return StopReason(
                    f"converged: corrected by the {len(known)} configurations measured (the baseline included), the "
                    "probe predicts none of the others faster than the best"
                )
            proposed = proposal.knobs
            study.enqueue_trial({name: proposed[name] for name in space.varied if KNOBS[name].active(proposed)})
        trial = study.ask()
        knobs = space.sample(trial)
        if proposal is not None and proposal.predicted is not None and knobs == proposal.knobs:
            trial.set_user_attr(PREDICTED_ATTR, proposal.predicted)
        key = config_key(knobs)
        if key in known:
            trial.set_user_attr(DUPLICATE_ATTR, known[key].label)
            _tell(study, trial, known[key])
            repeats += 1
            continue
        if (bound := out_of_memory_bound(knobs, ran_out)) is not None:
            known[key] = _not_measured(study, trial, bound)
            repeats += 1
            continue
        repeats = 0
        result, known[key] = _measure_trial(study, trial, knobs, run, settings, pruner)
        if (shown := OutOfMemory.of_trial(trial.number, result)) is not None:
            ran_out.append(shown)
        on_trial(TrialEvent(trial.number, done + 1, n_trials, result))
        broken = result.failure is not None and result.failure.kind.is_fault
        failures_in_a_row = failures_in_a_row + 1 if broken else 0
        if failures_in_a_row >= settings.max_consecutive_failures:
            return StopReason(
                f"the last {failures_in_a_row} trials all failed (the last with {result.failure}); "
                f"stopped rather than spend the budget (study.max_consecutive_failures)",
                aborted=True,
            )
    return StopReason(f"study.n_trials={n_trials} trials measured")


def counted_trials(study: optuna.Study) -> int:
    """Trials that measured a new configuration (complete, failed or pruned; not repeats, not interrupted, not those
    left unmeasured as out of memory)."""
    interrupted = set(study.user_attrs.get(INTERRUPTED_ATTR, []))
    return sum(
        1
        for t in study.get_trials(deepcopy=False, states=MEASURED_STATES)
        if DUPLICATE_ATTR not in t.user_attrs and NOT_MEASURED_ATTR not in t.user_attrs and t.number not in interrupted
    )


def _exhausted(space: SearchSpace, known: dict[str, _Outcome], ran_out: list[OutOfMemory]) -> bool:
    """Whether every configuration of ``space`` is measured or needs no less memory than one of ``ran_out``."""
    return all(config_key(knobs) in known or out_of_memory_bound(knobs, ran_out) for knobs in space.configurations())


def _not_measured(study: optuna.Study, trial: optuna.Trial, bound: OutOfMemory) -> _Outcome:
    """Tell Optuna that ``trial`` is pruned without a measurement, as its configuration needs no less memory than
    ``bound``, which ran out; the reason is kept on the trial."""
    trial.set_user_attr(
        NOT_MEASURED_ATTR,
        f"not measured: it needs no less memory than {bound.shown_by}, which ran out ({bound.message})",
    )
    study.tell(trial, state=TrialState.PRUNED)
    return _Outcome(trial.number, TrialState.PRUNED)


def _out_of_memory(study: optuna.Study) -> list[OutOfMemory]:
    """What ran out of memory, as the study stores it: the probe's settings, then the trials'."""
    probe = study.user_attrs.get(PROBE_ATTR)
    found = ProbeRecord.from_dict(probe).out_of_memory if probe is not None else []
    shown = (OutOfMemory.of_trial(trial.number, result) for trial, result in _stored_results(study))
    return [*found, *(entry for entry in shown if entry is not None)]


def within_budget(result: TrialResult, settings: StudySettings) -> TrialResult:
    """``result``, marked infeasible (keeping its measurement) if a peak of its memory is over its budget."""
    over = [said for said, excess in _budget_excesses(result, settings) if excess > 0] if result.ok else []
    if not over:
        return result
    return replace(result, failure=Failure(FailureKind.OUT_OF_MEMORY, "; ".join(over) + ": infeasible"))


_MEMORY_NAMES = {"gpu": "GPU memory (CUDA reserved)", "host": "host memory (process tree)"}


def _budget_excesses(result: TrialResult, settings: StudySettings) -> list[tuple[str, float]]:
    """(what it says, MB over) for each memory budget set, of a measured ``result``: study.memory_budget_mb bounds the
    limiting memory (the GPU's on CUDA, the host process tree's on CPU), study.host_memory_budget_mb the host tree.
    A negative excess is room left."""
    memory = result.measurement.memory
    checks = [
        ("study.memory_budget_mb", settings.memory_budget_mb, memory.limiting, memory.limiting_peak_mb),
        ("study.host_memory_budget_mb", settings.host_memory_budget_mb, "host", memory.peak_mb),
    ]
    return [
        (f"peak {peak:.0f} MB of {_MEMORY_NAMES[which]} is over {key}={budget:g}", peak - budget)
        for key, budget, which, peak in checks
        if budget is not None
    ]


@dataclass(frozen=True)
class _Outcome:
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


def _outcome(
    label: int | str, result: TrialResult, settings: StudySettings, pruned_at: float | None = None
) -> _Outcome:
    if result.measurement is None:
        pruned = result.failure.kind is FailureKind.PRUNED
        return _Outcome(label, TrialState.PRUNED, pruned_at=pruned_at) if pruned else _Outcome(label, TrialState.FAIL)
    values = [result.timing.throughput]
    if settings.multi_objective:
        values.append(result.peak_memory_mb)
    constraints = {
        "memory_over_budget_mb": max((excess for _, excess in _budget_excesses(result, settings)), default=0.0),
        "loss_incorrect": 1.0 if result.failure is not None and result.failure.kind is FailureKind.INCORRECT else 0.0,
    }
    return _Outcome(label, TrialState.COMPLETE, values, constraints)


def _observations(known: dict[str, _Outcome]) -> list[Observation]:
    """The throughput seen of every configuration measured (a pruned one's last reading) for the guide."""
    observations = []
    for key, outcome in known.items():
        seen = outcome.values[0] if outcome.values else outcome.pruned_at
        if seen is not None:
            observations.append(Observation(json.loads(key), seen, outcome.feasible_throughput is not None))
    return observations


def _pruner(settings: StudySettings, known: dict[str, _Outcome]) -> SlowerThanBestPruner | None:
    """Pruning compares one throughput against the best; it is off for multi-objective studies."""
    if settings.prune_margin is None or settings.multi_objective:
        return None

    def best() -> float | None:
        return max((o.feasible_throughput for o in known.values() if o.feasible_throughput), default=None)

    return SlowerThanBestPruner(settings.prune_margin, best)


def _measure_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    knobs: dict[str, Any],
    run: RunFn,
    settings: StudySettings,
    pruner: SlowerThanBestPruner | None,
) -> tuple[TrialResult, _Outcome]:
    last_reading: list[float] = []

    def on_progress(steps: int, throughput: float) -> str | None:
        trial.report(throughput, steps)
        last_reading[:] = [throughput]
        return pruner.reason(throughput) if trial.should_prune() else None

    try:
        result = run(knobs, f"trial-{trial.number}", on_progress if pruner else None)
    except BaseException:
        _mark_interrupted(study, [trial.number])
        study.tell(trial, state=TrialState.FAIL)
        raise
    result = within_budget(result, settings)
    trial.set_user_attr(RESULT_ATTR, result.to_dict())
    for key, value in metric_attrs(result).items():
        trial.set_user_attr(key, value)
    outcome = _outcome(trial.number, result, settings, last_reading[0] if last_reading else None)
    _tell(study, trial, outcome)
    return result, outcome


def _tell(study: optuna.Study, trial: optuna.Trial, outcome: _Outcome) -> None:
    if outcome.values is None:
        study.tell(trial, state=outcome.state)
        return
    for name, value in outcome.constraints.items():
        trial.set_constraint(name, value)
    study.tell(trial, outcome.values)


def _fail_interrupted_trials(study: optuna.Study) -> None:
    """Trials left running by a killed tuner: mark them failed and interrupted, and propose them again (with the
    probe's prediction for them, if it made one)."""
    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for trial in stale:
        study.tell(trial.number, state=TrialState.FAIL)
        if DUPLICATE_ATTR not in trial.user_attrs:
            predicted = trial.user_attrs.get(PREDICTED_ATTR)
            attrs = {PREDICTED_ATTR: predicted} if predicted is not None else None
            study.enqueue_trial(trial.params, user_attrs=attrs, skip_if_exists=False)
    _mark_interrupted(study, [t.number for t in stale])


def _mark_interrupted(study: optuna.Study, numbers: list[int]) -> None:
    if numbers:
        study.set_user_attr(INTERRUPTED_ATTR, [*study.user_attrs.get(INTERRUPTED_ATTR, []), *numbers])


def _known_outcomes(study: optuna.Study, settings: StudySettings) -> dict[str, _Outcome]:
    """Measured configurations (the baseline included) → what Optuna was told about them."""
    known: dict[str, _Outcome] = {}
    baseline = study.user_attrs.get(BASELINE_ATTR)
    if baseline is not None:
        result = TrialResult.from_dict(baseline)
        known[config_key(result.knobs)] = _outcome(BASELINE_LABEL, result, settings)
    for trial, result in _stored_results(study):
        readings = trial.intermediate_values
        pruned_at = readings[max(readings)] if readings else None
        known.setdefault(config_key(result.knobs), _outcome(trial.number, result, settings, pruned_at))
    return known


def _stored_results(study: optuna.Study) -> Iterator[tuple[optuna.trial.FrozenTrial, TrialResult]]:
    """Each trial that measured a configuration, with its result (repeats left out, and interrupted trials: a result
    stored for a trial never told, as a storage fault or a kill between the two writes leaves it, is measured again,
    as ``load_results`` leaves it out of the reports)."""
    interrupted = set(study.user_attrs.get(INTERRUPTED_ATTR, []))
    for trial in study.get_trials(deepcopy=False, states=MEASURED_STATES):
        attrs = trial.user_attrs
        if RESULT_ATTR in attrs and DUPLICATE_ATTR not in attrs and trial.number not in interrupted:
            yield trial, TrialResult.from_dict(attrs[RESULT_ATTR])


def _fingerprint(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _startup_trials(n_trials: int) -> int:
    """Random proposals before TPE models the results: Optuna's 10, fewer on small budgets."""
    return max(3, min(10, n_trials // 2))
