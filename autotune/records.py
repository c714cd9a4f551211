"""What a study stores: the keys of its records, the typed record of the probe, a configuration's identity, and
storage URLs fit to print. The study (``autotune/study/``) writes these records and the results
(``autotune/results/``) read them, both through this module, so neither imports the other.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any

from optuna.trial import TrialState

from autotune.trial.probe import ProbePlan, ProbeResult, probe_plan_from_dict
from autotune.trial.result import TrialResult

# Optuna user attributes: the study's own (META: what is tuned; BASELINE: its result; PROBE: ProbeRecord;
# CONFIRMATION: the race; TRIM: the races of its winner against its changes undone; INTERRUPTED: trial numbers a
# killed tuner left) and each trial's (RESULT: its TrialResult; DUPLICATE: the label of the trial that measured the
# same configuration; PREDICTED: the guide's prediction).
META_ATTR = "autotune.meta"
BASELINE_ATTR = "autotune.baseline"
PROBE_ATTR = "autotune.probe"
CONFIRMATION_ATTR = "autotune.confirmation"
TRIM_ATTR = "autotune.trim"
INTERRUPTED_ATTR = "autotune.interrupted"
RESULT_ATTR = "autotune.result"
DUPLICATE_ATTR = "autotune.duplicate_of"
PREDICTED_ATTR = "autotune.predicted_sps"
BASELINE_LABEL = "baseline"
# The states of trials that measured something: finished, failed (with a reason), or pruned.
MEASURED_STATES = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


def metric_attrs(result: TrialResult) -> dict[str, Any]:
    """A trial's headline figures as flat user attributes, for tools that show them (optuna-dashboard); autotune
    itself reads RESULT_ATTR. A failed trial's reason is its ``failure``."""
    attrs: dict[str, Any] = {"failure": str(result.failure)} if result.failure else {}
    if result.measurement is not None:
        attrs |= {
            "throughput_sps": result.timing.throughput,
            "peak_memory_mb": result.peak_memory_mb,
            "data_wait_share": result.timing.data_stall_fraction,
        }
    return attrs


def config_key(knobs: dict[str, Any]) -> str:
    """A configuration's identity: its knob values as canonical JSON."""
    return json.dumps(knobs, sort_keys=True)


def redact_url(url: str) -> str:
    """A storage URL with any password replaced by ***, fit to print."""
    return re.sub(r"(://[^:/@]+:)[^@]+@", r"\1***@", url)


@dataclass(frozen=True)
class ProbeRecord:
    """The differential probe's outcome, stored once per study: its plan and timings, and the DataLoader alone and
    the model step alone at the baseline (samples/s); or, where it failed or contradicted the baseline's
    measurement, only why (``failure``). ``wall_s``: how long it took."""

    wall_s: float
    plan: ProbePlan | None = None
    result: ProbeResult | None = None
    baseline_loader_sps: float | None = None
    baseline_compute_sps: float | None = None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeRecord:
        plan, result = data.get("plan"), data.get("result")
        return cls(
            wall_s=data["wall_s"],
            plan=probe_plan_from_dict(plan),
            result=ProbeResult.from_dict(result) if result else None,
            baseline_loader_sps=data.get("baseline_loader_sps"),
            baseline_compute_sps=data.get("baseline_compute_sps"),
            failure=data.get("failure"),
        )


@dataclass(frozen=True)
class TrialRecord:
    """One measured configuration: ``label`` is "baseline" or the Optuna trial number; ``predicted_sps`` what
    the probe's guide predicted for it when it proposed it (None: not proposed by the guide, or unknown)."""

    label: str
    result: TrialResult
    predicted_sps: float | None = None

    @property
    def throughput(self) -> float | None:
        return self.result.timing.throughput if self.result.ok else None
