"""What a study stores: the keys of its records, the typed records of its description, a machine's baseline and
probe, a configuration's identity, and which trials count as measured on a machine. The study (``autotune/study/``)
writes these records and the results (``autotune/results/``) read them, both through this module: results never
import the study (the study may use results' typed records, a layer below it).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import asdict, dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.pipeline.spec import PipelineSpec
from autotune.trial.result import FailureKind, ProbePlan, ProbeResult, TrialResult, probe_plan_from_dict

# Optuna user attributes: the study's own (META: what is tuned, StudyDescription), one
# machine's (``on_machine``: MACHINE: its description; BASELINE: the baseline's result, ``baseline_record``; PROBE:
# ProbeRecord, ``probe_record``;
# CONFIRMATION: the race; TRIM: the races of its winner against its changes undone; PROFILES: the baseline and the
# recommendation profiled, results/profile.py's TunedProfiles; TUNER_TIME, one per run: where the run's time went,
# results/tuner_time.py's RunTime) and each trial's (MACHINE: the id of the machine it
# runs on; TUNER: the host and pid of the tuner measuring it; CONFIG: its configuration's key, set before it is
# measured; CLAIM: the id of its claim on that configuration; ALIVE: when its tuner last said it is alive, and how
# often it says so; INTERRUPTED: its tuner was stopped or died while it ran; RESULT: its TrialResult; DUPLICATE: the
# label of the trial that measured the same configuration, or why another tuner's trial stands for it; PREDICTED: the
# guide's prediction; NOT_MEASURED: why it was told pruned without being measured; CAPPED: on a trial left for a later
# run because study.budget_s's cap ended its run, the seconds it ran, all the budget had left as it started).
META_ATTR = "autotune.meta"
MACHINE_ATTR = "autotune.machine"
TUNER_ATTR = "autotune.tuner"
CONFIG_ATTR = "autotune.config"
CLAIM_ATTR = "autotune.claim"
ALIVE_ATTR = "autotune.alive_at"
BASELINE_ATTR = "autotune.baseline"
PROBE_ATTR = "autotune.probe"
CONFIRMATION_ATTR = "autotune.confirmation"
TRIM_ATTR = "autotune.trim"
PROFILES_ATTR = "autotune.profiles"
TUNER_TIME_ATTR = "autotune.tuner_time"
INTERRUPTED_ATTR = "autotune.interrupted"
RESULT_ATTR = "autotune.result"
DUPLICATE_ATTR = "autotune.duplicate_of"
PREDICTED_ATTR = "autotune.predicted_sps"
NOT_MEASURED_ATTR = "autotune.not_measured"
CAPPED_ATTR = "autotune.capped_s"
BASELINE_LABEL = "baseline"
# The states of trials that measured something: finished, failed (with a reason), or pruned.
MEASURED_STATES = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


def on_machine(attr: str, machine: str) -> str:
    """The study attribute ``attr`` of one machine (``machine_id``): throughput measured on one machine is never
    compared with another's, so each machine of a study has its own baseline, probe, race and trim."""
    return f"{attr}@{machine}"


def study_machines(study: optuna.Study) -> dict[str, dict[str, Any]]:
    """The machines a study's results were measured on: their id (``machine_id``) → description."""
    prefix = on_machine(MACHINE_ATTR, "")
    return {key[len(prefix) :]: value for key, value in study.user_attrs.items() if key.startswith(prefix)}


@dataclass(frozen=True)
class StudyDescription:
    """What a study tunes, stored once in it (META): the pipeline, its baseline and batch policy, the objectives, the
    device, the search space's candidates and how a trial is measured. ``memory_budgets``: the study's memory budgets
    that are set (study.memory_budget_mb, study.host_memory_budget_mb; each trial is held to them as it is measured),
    None in a study made before they were kept, which resumes under any (``start._alike``). The tuner stores
    ``to_dict``'s form beside its fingerprint and the pipeline's code, and compares the forms as stored
    (``start.open_study``)."""

    pipeline: PipelineSpec
    baseline: dict[str, Any]
    batch_policy: str
    objectives: list[str]
    device: str
    space: dict[str, list[Any]]
    measure: dict[str, Any]
    memory_budgets: dict[str, float] | None

    @property
    def optimizer(self) -> dict[str, Any] | None:
        """The pipeline's optimizer config (None where it names none)."""
        return self.pipeline.components.get("optimizer")

    def describes(self, pipeline: PipelineSpec, baseline: dict[str, Any] | None = None) -> bool:
        """Whether this study tuned ``pipeline`` (its name and components as configured now: another's measurements
        say nothing of it) and, where ``baseline`` is given, from that baseline too (None: from any)."""
        return self.pipeline == pipeline and (baseline is None or self.baseline == baseline)

    def to_dict(self) -> dict[str, Any]:
        stored = {
            "pipeline": self.pipeline.to_dict(),
            "baseline": self.baseline,
            "batch_policy": self.batch_policy,
            "objectives": self.objectives,
            "device": self.device,
            "space": self.space,
            "measure": self.measure,
        }
        return stored if self.memory_budgets is None else {"study": self.memory_budgets, **stored}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StudyDescription:
        """The description ``data`` holds, in any form an autotune stored: the first kept no objectives or batch
        policy (it tuned throughput alone, the batch size free) and reads so; a pipeline without components reads as
        one with none (its optimizer None). What is stored beside it (the fingerprint, the pipeline's code) and an
        earlier autotune's machine in it (now one record per machine: MACHINE) are not read."""
        pipeline = data["pipeline"]
        return cls(
            pipeline=PipelineSpec(pipeline["name"], pipeline.get("components", {})),
            baseline=data["baseline"],
            batch_policy=data.get("batch_policy", "free"),
            objectives=data.get("objectives", ["throughput"]),
            device=data["device"],
            space=data["space"],
            measure=data["measure"],
            memory_budgets=data.get("study"),
        )


def stored_description(study: optuna.Study) -> StudyDescription | None:
    """What ``study`` tunes, as it stores it; None where it stores no description (not autotune's study)."""
    stored = study.user_attrs.get(META_ATTR)
    return StudyDescription.from_dict(stored) if stored is not None else None


def baseline_record(attrs: dict[str, Any], machine: str) -> TrialResult | None:
    """The baseline's result a study's ``attrs`` (its user attributes, as read) hold for ``machine`` (its
    ``machine_id``); None where none was stored there."""
    stored = attrs.get(on_machine(BASELINE_ATTR, machine))
    return TrialResult.from_dict(stored) if stored is not None else None


def measured_trials(
    study: optuna.Study, machine: str, trials: list[FrozenTrial] | None = None
) -> list[tuple[FrozenTrial, TrialResult]]:
    """The trials that measured a configuration on ``machine``, in trial order, each configuration once (the first
    trial stands for it: tuners sharing a study claim a configuration before measuring it, so this only guards).
    Repeats of a measured configuration and interrupted trials are left out (a result stored for a trial never told,
    as a storage fault or a kill between the two writes leaves it, is measured again). ``trials``: the study's
    trials as already read, where the caller has them."""
    seen: set[str] = set()
    found = []
    for trial in study.get_trials(deepcopy=False) if trials is None else trials:
        attrs = trial.user_attrs
        here = trial.state in MEASURED_STATES and attrs.get(MACHINE_ATTR) == machine
        if not here or RESULT_ATTR not in attrs or DUPLICATE_ATTR in attrs or interrupted(trial):
            continue
        result = TrialResult.from_dict(attrs[RESULT_ATTR])
        key = config_key(result.knobs)
        if key not in seen:
            seen.add(key)
            found.append((trial, result))
    return found


@dataclass(frozen=True)
class NotMeasured:
    """A configuration the search ruled out unmeasured (``NOT_MEASURED`` on its trial): the number of the first trial
    that did, its knobs, and why (``space.why_ruled_out``: what failure showed that it would fail)."""

    label: str
    knobs: dict[str, Any]
    reason: str


def not_measured_trials(
    study: optuna.Study, machine: str, trials: list[FrozenTrial] | None = None
) -> list[NotMeasured]:
    """The configurations ruled out unmeasured on ``machine``, in trial order, each once, but those measured since
    (a failure in a worker rules out only until a configuration with workers loads). ``trials``: as read already."""
    trials = study.get_trials(deepcopy=False) if trials is None else trials
    seen = {config_key(result.knobs) for _, result in measured_trials(study, machine, trials)}
    found = []
    for trial in trials:
        attrs = trial.user_attrs
        key = attrs.get(CONFIG_ATTR)
        if NOT_MEASURED_ATTR in attrs and attrs.get(MACHINE_ATTR) == machine and key not in seen:
            seen.add(key)
            found.append(NotMeasured(str(trial.number), json.loads(key), attrs[NOT_MEASURED_ATTR]))
    return found


def interrupted(trial: FrozenTrial) -> bool:
    """Whether ``trial`` was failed as interrupted (INTERRUPTED: its tuner was stopped or died while it ran). The mark
    is written before the trial is failed, by another tuner where it takes the trial's for dead, which its tuner may
    answer by telling it first: the mark of a trial not failed says nothing."""
    return trial.state is TrialState.FAIL and bool(trial.user_attrs.get(INTERRUPTED_ATTR))


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


def record_name(label: int | str) -> str:
    """A measured configuration's name in a sentence: "the baseline", or "trial 3"."""
    return "the baseline" if label == BASELINE_LABEL else f"trial {label}"


def config_key(knobs: dict[str, Any]) -> str:
    """A configuration's identity: its knob values as canonical JSON."""
    return json.dumps(knobs, sort_keys=True)


@dataclass(frozen=True)
class OutOfMemory:
    """A configuration that ran out of memory, what showed it (``shown_by``: "trial 3", or a setting of the probe)
    and its error. A probe setting fixes only the knobs it ran with: the batch size and workers of the DataLoader
    alone, every knob of the model step."""

    knobs: dict[str, Any]
    shown_by: str
    message: str

    @classmethod
    def of_trial(cls, label: int | str, result: TrialResult) -> OutOfMemory | None:
        """What trial ``label``'s ``result`` shows, if it ran out of memory (an allocation failed, killed for
        memory, or over the memory budget)."""
        if result.failure is None or result.failure.kind is not FailureKind.OUT_OF_MEMORY:
            return None
        return cls(result.knobs, record_name(label), result.failure.message)


# How torch names an exception it carries back from a DataLoader worker process.
IN_A_WORKER = "in DataLoader worker process"


@dataclass(frozen=True)
class WorkerFailure:
    """An exception a trial (``shown_by``: "trial 3") raised in a DataLoader worker process, while no configuration
    with workers has run (``workers_ran``): a dataset that cannot load in a worker (it refuses, or holds a handle
    that does not survive the fork) fails every configuration with workers alike. A probe's failure is not one: it
    reads the dataset in its own process before forking its workers, as no trial does."""

    shown_by: str
    message: str

    @classmethod
    def of_trial(cls, label: int | str, result: TrialResult) -> WorkerFailure | None:
        """What trial ``label``'s ``result`` shows, if it failed with an exception raised in one of its workers
        (shared memory running out is out of memory, not this: ``is_out_of_memory``)."""
        failure = result.failure
        if failure is None or failure.kind is not FailureKind.EXCEPTION or IN_A_WORKER not in failure.message:
            return None
        return cls(record_name(label), failure.message)


def workers_ran(result: TrialResult) -> bool:
    """Whether ``result``'s configuration loaded batches in DataLoader workers: it has workers and was measured,
    stopped as slower (pruned), or found incorrect, or ran out of memory with a measurement kept (over a budget):
    not ended by an exception, a signal, a timeout or a kill for memory, which may come before its workers load."""
    if (result.knobs.get("num_workers") or 0) == 0:
        return False
    failure = result.failure
    loaded = (FailureKind.PRUNED, FailureKind.INCORRECT)
    return failure is None or failure.kind in loaded or result.measurement is not None


@dataclass(frozen=True)
class ProbeRecord:
    """The differential probe's outcome, stored once per study: its plan and timings, and the DataLoader alone and
    the model step alone at the baseline (samples/s); where it failed or contradicted the baseline's measurement,
    why (``failure``), with its plan and timings if it ran (the settings that ran out of memory still count).
    ``wall_s``: how long it took; ``timing_noise``: the standard deviation of the log of one model step timing, as
    the anchor's timings showed it (``ProbeModel.noise``; None: not known); ``timing_move``: the most the machine's
    speed moved between two of them, as a fraction (``ProbeModel.largest_move``; None: not known). ``retry``: it
    failed for want of time (study.budget_s), not by what it read: its timings drifted and the budget left no time to
    run it again, or the budget's cap on its timeout ended its process (``clock.ended_by_budget``); a later run probes
    anew (``probe_model.stored_probe``). ``capped_s``: in the latter case, the seconds it ran, all the budget had left
    as it started: only a run that can give it more probes it again (``RunClock.affords``); None otherwise."""

    wall_s: float
    plan: ProbePlan | None = None
    result: ProbeResult | None = None
    baseline_loader_sps: float | None = None
    baseline_compute_sps: float | None = None
    failure: str | None = None
    timing_noise: float | None = None
    timing_move: float | None = None
    retry: bool = False
    capped_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def out_of_memory(self) -> list[OutOfMemory]:
        """The probe's settings that ran out of memory, each named by its knobs (a model step's: its batch size
        and the knobs it changes from the first, the anchor)."""
        if self.result is None:
            return []
        found = []
        anchor = self.plan.computes[0]
        for entry in self.result.out_of_memory:
            if entry.half == "loader":
                knobs = named = self.plan.loaders[entry.index]
                what = "DataLoader alone"
            else:
                knobs = self.plan.computes[entry.index]
                named = {"batch_size": knobs["batch_size"], **{k: v for k, v in knobs.items() if v != anchor[k]}}
                what = "model step"
            setting = ", ".join(f"{name}={value}" for name, value in named.items())
            found.append(OutOfMemory(knobs, f"the probe's {what} at {setting}", entry.message))
        return found

    @property
    def timing_spread(self) -> float | None:
        """How far one model step timing strays from its mean, either way, 95 % of the time, as a fraction (from
        ``timing_noise``); None where not known."""
        if self.timing_noise is None:
            return None
        return math.exp(statistics.NormalDist().inv_cdf(0.975) * self.timing_noise) - 1

    @property
    def workers_ran(self) -> bool:
        """Whether a setting of the probe's DataLoader with workers yielded batches."""
        if self.result is None:
            return False
        rates = self.result.loader_throughputs
        return any(rate is not None and self.plan.loaders[i]["num_workers"] > 0 for i, rate in enumerate(rates))

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
            timing_noise=data.get("timing_noise"),
            timing_move=data.get("timing_move"),
            retry=data.get("retry", False),
            capped_s=data.get("capped_s"),
        )


def probe_record(attrs: dict[str, Any], machine: str) -> ProbeRecord | None:
    """The probe's record a study's ``attrs`` (its user attributes, as read) hold for ``machine`` (its
    ``machine_id``); None where none was stored there."""
    stored = attrs.get(on_machine(PROBE_ATTR, machine))
    return ProbeRecord.from_dict(stored) if stored is not None else None


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
