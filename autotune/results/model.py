"""A study's results as plain data, read back from Optuna storage (never re-measured)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

import optuna
from optuna.importance import get_param_importances

from autotune.records import (
    BASELINE_ATTR,
    BASELINE_LABEL,
    CONFIRMATION_ATTR,
    DUPLICATE_ATTR,
    INTERRUPTED_ATTR,
    MEASURED_STATES,
    META_ATTR,
    PREDICTED_ATTR,
    PROBE_ATTR,
    RESULT_ATTR,
    TRIM_ATTR,
    ProbeRecord,
    TrialRecord,
)
from autotune.results.race import Confirmation
from autotune.trial.result import TrialResult


@dataclass(frozen=True)
class StudyResults:
    """Everything the reports need: what was tuned, on what machine, and every result.

    ``optimizer`` is the pipeline's optimizer config (for the learning-rate note); ``probe`` what the
    differential probe found, as stored in the study (None if it did not run); ``trim`` the races of the race's
    winner against its changes undone (``autotune/study/trim.py``); ``importance`` Optuna's importance of each knob
    that took more than one value among the completed trials, for reaching the best throughputs (``knob_importance``).
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

    @property
    def records(self) -> list[TrialRecord]:
        """The baseline (if measured) and every trial."""
        return ([self.baseline] if self.baseline else []) + self.trials


def load_results(study: optuna.Study) -> StudyResults:
    """Read every stored result of ``study``; repeats and interrupted trials are left out."""
    meta = study.user_attrs[META_ATTR]
    baseline = study.user_attrs.get(BASELINE_ATTR)
    confirmation = study.user_attrs.get(CONFIRMATION_ATTR)
    interrupted = set(study.user_attrs.get(INTERRUPTED_ATTR, []))
    trials = [
        TrialRecord(str(t.number), TrialResult.from_dict(t.user_attrs[RESULT_ATTR]), t.user_attrs.get(PREDICTED_ATTR))
        for t in study.get_trials(deepcopy=False, states=MEASURED_STATES)
        if RESULT_ATTR in t.user_attrs and DUPLICATE_ATTR not in t.user_attrs and t.number not in interrupted
    ]
    return StudyResults(
        study_name=study.study_name,
        pipeline=meta["pipeline"]["name"],
        device=meta["device"],
        machine=meta["machine"],
        space=meta["space"],
        measure=meta["measure"],
        baseline=TrialRecord(BASELINE_LABEL, TrialResult.from_dict(baseline)) if baseline else None,
        trials=trials,
        confirmation=Confirmation.from_dict(confirmation) if confirmation and "finalists" in confirmation else None,
        objectives=meta.get("objectives", ["throughput"]),
        batch_policy=meta.get("batch_policy", "free"),
        optimizer=meta["pipeline"].get("components", {}).get("optimizer"),
        probe=ProbeRecord.from_dict(study.user_attrs[PROBE_ATTR]) if PROBE_ATTR in study.user_attrs else None,
        trim=[Confirmation.from_dict(trim) for trim in study.user_attrs.get(TRIM_ATTR, [])],
        importance=knob_importance(study),
    )


def knob_importance(study: optuna.Study) -> dict[str, float]:
    """Optuna's default importance (PED-ANOVA: how much each knob matters to reaching the top throughputs) of the
    knobs that took two values or more among the completed trials; empty with fewer than two such knobs (one
    alone would read 1.0 whatever it did)."""
    complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
    values: dict[str, set] = {}
    for trial in complete:
        for name, value in trial.params.items():
            values.setdefault(name, set()).add(value)
    varied = [name for name, seen in values.items() if len(seen) > 1]
    if len(varied) < 2:
        return {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its reminder that lower targets are better: throughput is negated below
        return get_param_importances(study, params=varied, target=lambda trial: -trial.values[0])
