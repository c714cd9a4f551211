"""A study's results as plain data, read back from Optuna storage (never re-measured)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

from autotune.measure.environment import this_machine_id
from autotune.records import (
    BASELINE_LABEL,
    CONFIRMATION_ATTR,
    META_ATTR,
    PREDICTED_ATTR,
    PROFILES_ATTR,
    TRIM_ATTR,
    NotMeasured,
    ProbeRecord,
    StudyDescription,
    TrialRecord,
    baseline_record,
    measured_trials,
    not_measured_trials,
    on_machine,
    probe_record,
    study_machines,
)
from autotune.results.profile import TunedProfiles
from autotune.results.race import Confirmation
from autotune.results.tuner_time import TunerTime, load_tuner_time

# Importance compares the best half of the trials with all of them, and only from IMPORTANCE_MIN_TRIALS completed
# trials: in simulated studies of random trials the knob that mattered most came first in 80-85 % of those of 30
# trials, against 32-50 % with Optuna's default (the best tenth), and in 35-37 % of those of 8 trials, the most a
# guided search runs by default (benchmarks/importance_model.py, docs/benchmarks.md section 11).
IMPORTANCE_QUANTILE = 0.5
IMPORTANCE_MIN_TRIALS = 30


@dataclass(frozen=True)
class StudyResults:
    """Everything the reports need: what was tuned, on what machine, and every result measured there.

    ``optimizer`` is the pipeline's optimizer config (for the learning-rate note); ``probe`` what the
    differential probe found, as stored in the study (None if it did not run); ``trim`` the races of the race's
    winner against its changes undone (``autotune/study/trim.py``); ``importance`` Optuna's importance of each knob
    that took more than one value among the completed trials, for reaching the best throughputs (``knob_importance``;
    empty below IMPORTANCE_MIN_TRIALS);
    ``profiles`` the baseline and the recommendation profiled after the race (None where they were not);
    ``tuner_time`` where each run's time went (None: a study of an earlier autotune). ``not_measured``: the
    configurations the search ruled out unmeasured (out of memory, failures in DataLoader workers) and why.
    ``machine`` describes the machine (its ``machine_id``) whose results these are; ``other_machines`` those the
    study holds results of too, never ranked with these (``load_results`` of each reports them).
    """

    study_name: str
    pipeline: str
    device: str
    machine: dict[str, Any]
    space: dict[str, list[Any]]
    measure: dict[str, Any]
    baseline: TrialRecord | None
    trials: list[TrialRecord] = field(default_factory=list)
    confirmation: Confirmation | None = None
    objectives: list[str] = field(default_factory=lambda: ["throughput"])
    batch_policy: str = "free"
    optimizer: dict[str, Any] | None = None
    probe: ProbeRecord | None = None
    trim: list[Confirmation] = field(default_factory=list)
    importance: dict[str, float] = field(default_factory=dict)
    profiles: TunedProfiles | None = None
    machine_id: str = ""
    other_machines: dict[str, dict[str, Any]] = field(default_factory=dict)
    tuner_time: TunerTime | None = None
    not_measured: list[NotMeasured] = field(default_factory=list)

    @property
    def records(self) -> list[TrialRecord]:
        """The baseline (if measured) and every trial."""
        return ([self.baseline] if self.baseline else []) + self.trials


def load_results(study: optuna.Study, machine: str | None = None) -> StudyResults:
    """Read every result ``study`` stores of ``machine`` (a ``machine_id``: none where it measured nothing there;
    None: this machine where the study has measured it, else the first it has, as mode=report renders a study
    whatever machine it was measured on: ``choose_machine``); repeats and interrupted trials are left out."""
    machines = study_machines(study)
    machine = machine or choose_machine(machines)
    attrs = study.user_attrs  # read once: each read is a query of the storage and a deep copy
    described = StudyDescription.from_dict(attrs[META_ATTR])
    baseline = baseline_record(attrs, machine)
    confirmation = attrs.get(on_machine(CONFIRMATION_ATTR, machine))
    every = study.get_trials(deepcopy=False)
    measured = measured_trials(study, machine, every)
    trials = [TrialRecord(str(t.number), result, t.user_attrs.get(PREDICTED_ATTR)) for t, result in measured]
    return StudyResults(
        study_name=study.study_name,
        pipeline=described.pipeline.name,
        device=described.device,
        machine=machines.get(machine, {}),
        space=described.space,
        measure=described.measure,
        baseline=TrialRecord(BASELINE_LABEL, baseline) if baseline is not None else None,
        trials=trials,
        confirmation=Confirmation.from_dict(confirmation) if confirmation is not None else None,
        objectives=described.objectives,
        batch_policy=described.batch_policy,
        optimizer=described.optimizer,
        probe=probe_record(attrs, machine),
        trim=[Confirmation.from_dict(trim) for trim in attrs.get(on_machine(TRIM_ATTR, machine)) or []],
        importance=knob_importance(study, [trial for trial, result in measured if result.ok]),  # as the report counts
        profiles=_profiles(attrs.get(on_machine(PROFILES_ATTR, machine))),
        machine_id=machine,
        other_machines={other: about for other, about in machines.items() if other != machine},
        tuner_time=load_tuner_time(attrs, machine),
        not_measured=not_measured_trials(study, machine, every),
    )


def _profiles(stored: dict[str, Any] | None) -> TunedProfiles | None:
    return TunedProfiles.from_dict(stored) if stored is not None else None


def choose_machine(machines: dict[str, dict[str, Any]]) -> str:
    """This machine's id (described here, which imports torch, only where ``machines`` offer a choice) where
    ``machines`` has it, else the first of them ("" for none)."""
    if len(machines) < 2:
        return next(iter(machines), "")
    here = this_machine_id()
    return here if here in machines else next(iter(machines), "")


def knob_importance(
    study: optuna.Study,
    measured: list[optuna.trial.FrozenTrial],
    quantile: float = IMPORTANCE_QUANTILE,
    min_trials: int = IMPORTANCE_MIN_TRIALS,
) -> dict[str, float]:
    """Optuna's PED-ANOVA importance (how much each knob sets the best ``quantile`` of the trials apart from all) of
    the knobs that took two values or more among the completed trials of ``measured`` (a machine's measured trials);
    empty with fewer than ``min_trials`` completed trials, or fewer than two such knobs (one alone would read 1.0
    whatever it did)."""
    complete = [trial for trial in measured if trial.state is optuna.trial.TrialState.COMPLETE]
    if len(complete) < min_trials:
        return {}
    values: dict[str, set] = {}
    for trial in complete:
        for name, value in trial.params.items():
            values.setdefault(name, set()).add(value)
    varied = [name for name, seen in values.items() if len(seen) > 1]
    if len(varied) < 2:
        return {}
    alone = optuna.create_study(directions=study.directions)  # in memory: this machine's trials, for Optuna to read
    alone.add_trials(complete)
    evaluator = PedAnovaImportanceEvaluator(target_quantile=quantile)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its reminder that lower targets are better: throughput is negated below
        return get_param_importances(alone, evaluator=evaluator, params=varied, target=lambda trial: -trial.values[0])
