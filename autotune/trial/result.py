"""What goes into a trial subprocess and what comes out (the probe's plan and result, the plain loop's run, the
measurement or the failure): plain, JSON-serialisable data. It imports no torch: the tuner's process reads it."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from enum import Enum
from typing import Any, Literal

from autotune.measure.core_speed import CoreSpeed
from autotune.measure.measurement import Measurement
from autotune.measure.profiling import ProfilePlan, ProfileResult
from autotune.measure.recorder import Timing, WindowPlan, window_plan_from_dict
from autotune.pipeline.facts import Inspection
from autotune.pipeline.spec import PipelineSpec

TUNER_PID_ENV = "AUTOTUNE_TUNER_PID"  # the trial watches this process and exits when it dies
LAUNCHED_AT_ENV = "AUTOTUNE_LAUNCHED_AT"  # the wall-clock time the tuner asked for the trial's process


@dataclass(frozen=True)
class ProbePlan:
    """Loader settings ({batch_size, num_workers}) and compute settings (complete knob values) to time, each for
    ``seconds``; a compute setting after ``warmup_steps`` untimed steps, for ``min_steps`` steps at least. The first
    loader setting is the anchor's (``probe_model.anchor_loader``): where it fails, the probe ends. The first
    compute setting (the anchor) is timed again before each index of ``anchor_before``: its timings show the
    probe's drift and noise, against which it tells a knob's effect (``ProbeModel.told_apart``). A setting whose own
    values read more than ``far_slower`` times slower than the anchor at the anchor's batch size is not timed at the
    other batch sizes: no batch size makes it a candidate (the anchor's noise is tens of percent, not a factor of
    three) and its slow steps would take most of the probe (bf16 without bf16 units: ~0.1x on a CPU); the model reads
    its factor at the anchor's batch size for all (``ProbeModel._factor``).

    The defaults are the shortest measured to agree with a longer probe as well as that one agrees with itself
    (``benchmarks/probe_timing.py``, docs/benchmarks.md section 9): the probe steers, the trials measure."""

    loaders: list[dict[str, Any]]
    computes: list[dict[str, Any]]
    seconds: float = 0.25
    warmup_steps: int = 1
    min_steps: int = 2
    anchor_before: list[int] = field(default_factory=list)
    far_slower: float = 3.0


Half = Literal["loader", "compute"]


@dataclass(frozen=True)
class ProbeFailure:
    """A setting of the plan that raised: its ``half`` ("loader": ``ProbePlan.loaders``, "compute":
    ``ProbePlan.computes``), its index there, and the error, on one line."""

    half: Half
    index: int
    message: str


@dataclass(frozen=True)
class ProbeOutOfMemory(ProbeFailure):
    """A setting of the plan that ran out of memory."""


@dataclass(frozen=True)
class ProbeResult:
    """Samples/s of each loader setting alone and of each compute setting on a cached batch, in plan order: None
    for a setting that ran out of memory, which ``out_of_memory`` lists with its error, or raised anything else,
    which ``failed`` lists (a model that cannot take channels_last: the other settings still steer the search).
    ``anchor_again``: the first model step setting timed once more after all the others (None: it did not run),
    which tells whether the machine's speed held while the probe ran; ``anchor_repeats``: it timed again before
    each index of ``ProbePlan.anchor_before`` (None where it did not run). ``loader_cpu``: the CPU seconds a sample took
    each loader setting's processes (``LoaderRate``), None where not read (empty: a probe stored before they were);
    ``loader_others_cores``: the cores' worth other processes used while the loader settings were timed (None: not
    read), beside which the CPU readings do not tell loading that waits for files from loading that waits for a
    core."""

    loader_throughputs: list[float | None] = field(default_factory=list)
    compute_throughputs: list[float | None] = field(default_factory=list)
    out_of_memory: list[ProbeOutOfMemory] = field(default_factory=list)
    failed: list[ProbeFailure] = field(default_factory=list)
    anchor_again: float | None = None
    loader_cpu: list[float | None] = field(default_factory=list)
    loader_others_cores: float | None = None
    anchor_repeats: list[float | None] = field(default_factory=list)

    @property
    def skipped(self) -> list[int]:
        """The compute settings not timed (None, yet neither out of memory nor raised): their own values read far
        slower at the anchor's batch size (``ProbePlan.far_slower``)."""
        told = {entry.index for entry in [*self.out_of_memory, *self.failed] if entry.half == "compute"}
        return [index for index, rate in enumerate(self.compute_throughputs) if rate is None and index not in told]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        out_of_memory = [ProbeOutOfMemory(**entry) for entry in data.get("out_of_memory", [])]
        failed = [ProbeFailure(**entry) for entry in data.get("failed", [])]
        return cls(
            data["loader_throughputs"],
            data["compute_throughputs"],
            out_of_memory,
            failed,
            data.get("anchor_again"),
            data.get("loader_cpu", []),
            data.get("loader_others_cores"),
            data.get("anchor_repeats", []),
        )


def probe_plan_from_dict(data: dict[str, Any] | None) -> ProbePlan | None:
    return ProbePlan(**data) if data else None


@dataclass(frozen=True)
class PlainRun:
    """What the plain loop measured: ``samples`` in ``steps`` steps over ``window_s`` seconds, after
    ``warmup_steps`` untimed steps; ``epoch_boundaries`` is how many epochs began inside the window."""

    throughput: float
    samples: int
    steps: int
    window_s: float
    warmup_steps: int
    epoch_boundaries: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlainRun:
        return cls(**data)


class FailureKind(str, Enum):
    """Why a trial produced no measurement."""

    EXCEPTION = "exception"
    OUT_OF_MEMORY = "out_of_memory"
    SIGNAL = "signal"
    TIMEOUT = "timeout"
    NO_RESULT = "no_result"
    INCORRECT = "incorrect"  # the loss is not finite, or differs from fp32 beyond measure.loss_tolerance
    PRUNED = "pruned"  # stopped early: clearly slower than the best so far (not a fault)
    # Its process refused the cores its slot pins it to (study.cpu_sets), which the machine no longer lets the run use:
    # the run's, no verdict on the configuration, so no trial stores it (the tuner stops the run at it).
    PLACEMENT = "placement"

    @property
    def is_fault(self) -> bool:
        """Whether this says the pipeline or the machine is broken, rather than that the configuration is slow
        (pruned), too big for the memory (over the budget, or killed for memory) or inexact (incorrect): a
        verdict on that configuration, which is data, not a reason to stop the study."""
        return self not in (FailureKind.PRUNED, FailureKind.OUT_OF_MEMORY, FailureKind.INCORRECT)


@dataclass(frozen=True)
class Failure:
    """Why a trial produced no measurement; ``reading``: a pruned trial's running throughput (samples/s) when it was
    stopped (one the pruner stopped after a loss that was not finite, INCORRECT, too), None otherwise;
    ``budget_cut``: a timeout that what study.budget_s had left set, not measure.trial_timeout_s
    (``RunClock.as_ended_by_budget``), so no fault of the configuration's (the message says so in words for the user;
    this is what the tuner reads: ``clock.ended_by_budget``)."""

    kind: FailureKind
    message: str
    reading: float | None = None
    budget_cut: bool = False

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.message}"

    @property
    def ran_steps(self) -> bool:
        """Whether the trial ran its values through its first steps before it ended: pruned, or stopped by the pruner
        after a loss that was not finite (INCORRECT with a ``reading``)."""
        return self.kind is FailureKind.PRUNED or (self.kind is FailureKind.INCORRECT and self.reading is not None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "message": self.message,
            "reading": self.reading,
            "budget_cut": self.budget_cut,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failure:
        return cls(FailureKind(data["kind"]), data["message"], data.get("reading"), data.get("budget_cut", False))


@dataclass(frozen=True)
class TrialRequest:
    """Everything a trial subprocess needs: the pipeline, the knob values and how to measure.

    ``effective_batch_size`` (search.batch_policy=fixed_effective) makes ``knobs["batch_size"]`` a
    micro-batch with gradient accumulation; ``compile_cache_dir`` is torch.compile's on-disk cache.
    With ``probe``, the subprocess runs the differential probe instead of measuring ``knobs``; with ``plain``, it
    times ``knobs`` with the plain loop that judges the harness (``trial/plain.py``) instead; with ``inspect``, it
    reads the facts of the machine's devices and of the pipeline (``pipeline/inspect.py``), ``device`` being the
    one asked for (measure.device: "auto" too); with ``profile``, it profiles ``knobs`` (``trial/profiling.py``)
    instead of measuring them. ``placement`` is the environment that pins it to its slot (``trial/placement.py``).
    """

    pipeline: PipelineSpec
    knobs: dict[str, Any]
    device: str
    plan: WindowPlan
    memory_interval_s: float
    effective_batch_size: int | None = None
    loss_tolerance: float = 0.05
    compile_cache_dir: str | None = None
    probe: ProbePlan | None = None
    plain: bool = False
    inspect: bool = False
    profile: ProfilePlan | None = None
    placement: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pipeline": self.pipeline.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRequest:
        return cls(
            pipeline=PipelineSpec.from_dict(data["pipeline"]),
            knobs=data["knobs"],
            device=data["device"],
            plan=window_plan_from_dict(data["plan"]),
            memory_interval_s=data["memory_interval_s"],
            effective_batch_size=data.get("effective_batch_size"),
            loss_tolerance=data.get("loss_tolerance", 0.05),
            compile_cache_dir=data.get("compile_cache_dir"),
            probe=probe_plan_from_dict(data.get("probe")),
            plain=data.get("plain", False),
            inspect=data.get("inspect", False),
            profile=ProfilePlan.from_dict(data.get("profile")),
            placement=data.get("placement", {}),
        )


@dataclass(frozen=True)
class LossCheck:
    """The evidence of the correctness guard: the first training step's loss and, under amp or compile, the fp32
    eager loss of the same weights, batch and seed it was compared with (None: the step was fp32 eager itself), and
    where that loss draws random numbers, the range it took over several seeds (``fp32_spread``; its mean is
    ``fp32_loss``: ``pipeline.setup.ReferenceLoss``); with
    fp16's loss scaler, the timed window's optimizer steps and how many of them it skipped, at least
    (``pipeline.setup.skipped_steps``; None without a scaler)."""

    first_loss: float
    fp32_loss: float | None = None
    optimizer_steps: int | None = None
    skipped_steps: int | None = None
    fp32_spread: float | None = None


@dataclass(frozen=True)
class Disturbance:
    """What slowed a run from beside it, so that its figures may read low (``TrialResult.disturbance``): the cores'
    worth of CPU other processes took of its nearly saturated cores (``others_cores``: ``SystemReport.cores_taken``),
    the other processes computing on its GPU (``gpu_processes``), how many times slower than usual its cores ran
    around it (``cores_slowdown``: ``CoreSpeed.slow``); each None where that did not happen."""

    others_cores: float | None = None
    gpu_processes: int | None = None
    cores_slowdown: float | None = None

    @property
    def cores_alone(self) -> bool:
        """Whether only the cores' reading flagged the run (no other process took its cores or its GPU)."""
        return self.others_cores is None and self.gpu_processes is None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | str) -> Disturbance:
        """``data`` as ``to_dict`` wrote it, or as earlier versions stored it: in words ("0.8 cores", "1 other
        process on the GPU", "the cores ran 1.4x slow", joined by "; ")."""
        if not isinstance(data, str):
            return cls(**data)
        cores = re.search(r"([\d.]+) cores\b", data)
        gpu = re.search(r"(\d+) other process", data)
        slow = re.search(r"ran ([\d.]+)x slow", data)
        return cls(
            float(cores.group(1)) if cores else None,
            int(gpu.group(1)) if gpu else None,
            float(slow.group(1)) if slow else None,
        )


@dataclass(frozen=True)
class TrialResult:
    """One trial's outcome: a measurement, or a failure with its reason.

    ``wall_s`` is the whole trial, as the tuner saw it (process spawn to exit); ``startup_s`` the
    subprocess's interpreter start and imports; ``build_s`` building the pipeline and applying knobs.
    With repeated runs, the median run is kept and ``repeat_throughputs`` lists every run's throughput.
    ``loss_check`` is what the correctness guard compared (None where no step ran). A probe's result is in
    ``probe``, the plain loop's in ``plain``, an inspection's in ``inspection``, a profiling run's in ``profile``.
    ``core_speed``: the cores read around its process by the tuner (None: not read: a search trial, the probe, the
    inspection, or measure.core_speed=false).
    """

    knobs: dict[str, Any]
    measurement: Measurement | None = None
    failure: Failure | None = None
    wall_s: float = 0.0
    startup_s: float | None = None
    build_s: float | None = None
    repeat_throughputs: list[float] | None = None
    probe: ProbeResult | None = None
    loss_check: LossCheck | None = None
    plain: PlainRun | None = None
    inspection: Inspection | None = None
    profile: ProfileResult | None = None
    core_speed: CoreSpeed | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def ran_values(self) -> bool:
        """Whether the trial ran its values: measured (a loss that was not finite too), or stopped after its first
        steps with a reading of them (``Failure.ran_steps``)."""
        return self.measurement is not None or (self.failure is not None and self.failure.ran_steps)

    @property
    def disturbed(self) -> bool:
        """Whether something beside the run may have slowed it, so that its figures may read low: other processes
        took its cores or shared its GPU (``SystemReport.disturbed``), or the cores ran slow around it
        (``CoreSpeed.slow``). A failed run is not disturbed: it has no figures."""
        return self.disturbance is not None

    @property
    def disturbance(self) -> Disturbance | None:
        """What disturbed the run (``Disturbance``); None where nothing did or it failed."""
        if not self.ok or self.measurement is None:
            return None
        system = self.measurement.system
        found = Disturbance(
            others_cores=system.other_processes_cores if system.cores_taken else None,
            gpu_processes=system.gpu_other_processes or None,
            cores_slowdown=self.core_speed.slowdown if self.core_speed and self.core_speed.slow else None,
        )
        return found if found != Disturbance() else None

    @property
    def timing(self) -> Timing | None:
        return self.measurement.timing if self.measurement else None

    @property
    def peak_memory_mb(self) -> float | None:
        """The peak of the limiting memory (``MemoryReport.limiting_peak_mb``: the GPU's on CUDA, the host process
        tree's on CPU): the one study.memory_budget_mb, the peak_memory objective, the tie-breaks and
        recommended.yaml use."""
        return self.measurement.memory.limiting_peak_mb if self.measurement else None

    @property
    def host_peak_memory_mb(self) -> float | None:
        """The peak of the host process tree, DataLoader workers included (the limiting memory on CPU)."""
        return self.measurement.memory.peak_mb if self.measurement else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "knobs": self.knobs,
            "measurement": self.measurement.to_dict() if self.measurement else None,
            "failure": self.failure.to_dict() if self.failure else None,
            "wall_s": self.wall_s,
            "startup_s": self.startup_s,
            "build_s": self.build_s,
            "repeat_throughputs": self.repeat_throughputs,
            "probe": self.probe.to_dict() if self.probe else None,
            "loss_check": asdict(self.loss_check) if self.loss_check else None,
            "plain": self.plain.to_dict() if self.plain else None,
            "inspection": self.inspection.to_dict() if self.inspection else None,
            "profile": self.profile.to_dict() if self.profile else None,
            "core_speed": asdict(self.core_speed) if self.core_speed else None,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        return cls(
            knobs=data["knobs"],
            measurement=Measurement.from_dict(data["measurement"]) if data.get("measurement") else None,
            failure=Failure.from_dict(data["failure"]) if data.get("failure") else None,
            wall_s=data.get("wall_s", 0.0),
            startup_s=data.get("startup_s"),
            build_s=data.get("build_s"),
            repeat_throughputs=data.get("repeat_throughputs"),
            probe=ProbeResult.from_dict(data["probe"]) if data.get("probe") else None,
            loss_check=LossCheck(**data["loss_check"]) if data.get("loss_check") else None,
            plain=PlainRun.from_dict(data["plain"]) if data.get("plain") else None,
            inspection=Inspection.from_dict(data["inspection"]) if data.get("inspection") else None,
            profile=ProfileResult.from_dict(data["profile"]) if data.get("profile") else None,
            core_speed=CoreSpeed(**data["core_speed"]) if data.get("core_speed") else None,
        )

    def with_wall_time(self, wall_s: float) -> TrialResult:
        return replace(self, wall_s=wall_s)
