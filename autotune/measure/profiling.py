"""What a profiling run is asked to do and what it found: plain, JSON-serialisable records with no torch (the tuner's
process reads them); the run itself: ``autotune.trial.profiling``, with the measure modules that fill each record."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.measure.gc_pauses import GcPauses
from autotune.measure.hotspots import Hotspots
from autotune.measure.measurement import SystemReport
from autotune.measure.page_faults import PageFaults


@dataclass(frozen=True)
class ProfilePlan:
    """A profiling run: ``warmup_steps`` untimed steps, then ``steps`` steps timed stage by stage (garbage
    collection, page faults and the cores busy watched), more where they took under ``min_time_s`` (up to
    ``max_steps``: each step's stages are kept), ``steps`` with
    memory read after each, ``trace_steps`` steps under torch.profiler (its trace written to ``trace_file``),
    and ``hot_batches`` batches loaded under cProfile. Under gradient accumulation the stage-timed and the traced
    steps are whole cycles of micro-batches, their counts rounded up to one (``time_stages``, ``trace_steps``)."""

    trace_file: str
    steps: int = 30
    # CPU time is counted in clock ticks (10 ms) per process: the cores busy over a tenth of a second, as 30 steps of
    # a small model take, are read to a core or worse; over half a second, to a few per cent.
    min_time_s: float = 0.5
    max_steps: int = 500
    trace_steps: int = 5
    hot_batches: int = 10
    warmup_steps: int = 5

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ProfilePlan | None:
        return cls(**data) if data else None


@dataclass(frozen=True)
class CudaAllocation:
    """``count`` allocations of ``size_mb`` each made at ``where``: the user's line that led to them, else the
    innermost frame recorded (file:line function)."""

    size_mb: float
    count: int
    where: str


@dataclass(frozen=True)
class MemoryTrend:
    """After each step: the memory of the training process and its DataLoader workers (``tree_mb``, by ``metric``:
    "pss" where the OS reports it, else "rss"), and on a GPU what CUDA's allocator has allocated
    (``cuda_allocated_mb``, else None). Under gradient accumulation a reading follows each whole cycle, of
    ``steps_apart`` micro-batches (1: every step).

    PSS, not RSS: a forked worker shares its parent's pages, freed ones included, and a leak that fills those counts
    in the worker's RSS from the start, so RSS would not grow; PSS moves each page to the worker that writes it. Its
    read takes milliseconds a process, in which workers go on loading: it runs on steps of its own, not timed ones.
    """

    tree_mb: list[float]
    cuda_allocated_mb: list[float] | None = None
    metric: str = "pss"
    steps_apart: int = 1

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryTrend:
        return cls(**data)


@dataclass(frozen=True)
class StageTiming:
    """Seconds per step of each stage over ``steps`` consecutive steps (lists, one entry a step), the batches
    ``batch_size`` samples each, loaded by ``num_workers`` workers (0: the training process).

    ``wait_s`` is the training process blocked on the DataLoader (without workers, that is where fetching and
    collating happen); ``transfer_s`` the copy to the device and the conversion of image inputs to the model's memory
    layout after it (channels_last's: one stage, as the training loop does them); ``step_s`` the whole training
    step, of which ``forward_s`` and ``optimizer_s`` (0 where gradient accumulation skipped it: the steps are then
    whole cycles of micro-batches, so that the mean holds the optimizer's share); the rest of it is the loss and the
    backward pass. ``fetch_s`` and ``collate_s`` are each batch's, in the process that made it.
    ``wall_s`` is the whole sample, loop included. ``epoch_starts``: the steps (their indices) whose batch began an
    epoch, a fresh pass over the DataLoader, where workers that do not persist start again; None in a profile stored
    before they were recorded (unknown).
    """

    steps: int
    batch_size: int
    num_workers: int
    wall_s: float
    wait_s: list[float]
    transfer_s: list[float]
    forward_s: list[float]
    optimizer_s: list[float]
    step_s: list[float]
    fetch_s: list[float]
    collate_s: list[float]
    epoch_starts: list[int] | None = None

    @property
    def backward_s(self) -> list[float]:
        """The loss and the backward pass (and zeroing the gradients): the step less forward and optimizer."""
        return [max(0.0, s - f - o) for s, f, o in zip(self.step_s, self.forward_s, self.optimizer_s, strict=True)]

    @property
    def loop_s(self) -> float:
        """Mean seconds a step of the whole loop: the sample's wall time over its steps."""
        return self.wall_s / self.steps

    def mean(self, stage: str) -> float:
        """Mean seconds per step (per batch for fetch and collate) of ``stage``, a field or ``backward_s``."""
        return statistics.fmean(getattr(self, stage))

    @property
    def wait_share(self) -> float:
        """The share of the loop's time spent blocked waiting for data."""
        return sum(self.wait_s) / self.wall_s

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StageTiming:
        return cls(**data)


@dataclass(frozen=True)
class OperatorStat:
    """One operator (by name) over the active steps: its calls, and its self time on the host and on the device
    (seconds; 0 off a GPU); ``median_call_cpu_s``: the host self time of its median call, where its calls were
    timed one by one (inside the training step)."""

    name: str
    calls: int
    self_cpu_s: float
    self_device_s: float = 0.0
    median_call_cpu_s: float | None = None

    @property
    def typical_call_cpu_s(self) -> float:
        """One call's host self time: the median call's where known, which a call the OS preempted (wall time a busy
        machine adds to whichever operator was running) does not move; else the mean call's."""
        return self.median_call_cpu_s if self.median_call_cpu_s is not None else self.self_cpu_s / max(self.calls, 1)


# The range ``trace.py`` records around the training step's closing wait for the GPU (its final synchronize), kept
# among the step's operators under this name: the host waiting for the device, neither its overhead nor work.
DEVICE_WAIT = "autotune: waiting for the device"


@dataclass(frozen=True)
class OperatorProfile:
    """What torch.profiler saw over ``active_steps`` steps (whole cycles of micro-batches under gradient
    accumulation), exported to ``trace_file``: the ``top`` operators of the whole steps by self time (the device's
    where there is one, else the host's), every operator that ran inside the training step (``step_operators``), the
    training step's wall time (``step_s``) and, of it, the time the host spent outside any operator
    (``outside_operators_s``: Python and the framework between operators), totals over the active steps. ``device``
    is "cpu" or "cuda"; ``dispatch_s``: what one call of a trivial operator cost on the host right after the trace
    (its dispatch alone, and whatever slowed the host then)."""

    active_steps: int
    trace_file: str
    device: str
    step_s: float
    outside_operators_s: float
    top: list[OperatorStat] = field(default_factory=list)
    step_operators: list[OperatorStat] = field(default_factory=list)
    dispatch_s: float = 0.0

    @property
    def kernels_recorded(self) -> bool:
        """Whether the trace holds the device time of the step's operators: on a GPU, where it recorded any kernel
        (without CUPTI the profiler records none: every device time 0, which is no measurement); never off one."""
        return self.device == "cuda" and any(op.self_device_s > 0 for op in self.step_operators)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OperatorProfile:
        top = [OperatorStat(**op) for op in data.get("top", [])]
        step_operators = [OperatorStat(**op) for op in data.get("step_operators", [])]
        return cls(**{**data, "top": top, "step_operators": step_operators})


@dataclass(frozen=True)
class CpuLoad:
    """The CPU over the stage-timed steps, read as a trial reads its timed window (``system``: the machine's cores,
    what the training process and its workers used, and so what other processes used: ``autotune.measure.system``),
    and the compute threads the training process ran (``threads``: torch's intra-op threads)."""

    system: SystemReport
    threads: int

    @property
    def cores(self) -> int:
        """The cores the training process may run on."""
        return len(self.system.cpu_per_core_percent)

    @property
    def free_cores(self) -> float:
        """Cores' worth of CPU the machine's other processes left to the training process and its workers."""
        return max(0.0, self.cores - self.system.other_processes_cores)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuLoad:
        return cls(SystemReport(**data["system"]), data["threads"])


@dataclass(frozen=True)
class ProfileResult:
    """A profiling run's findings: each stage's time, memory after each step, the garbage collector's pauses, the
    profiler's operators, the data pipeline's hot functions, on a GPU its largest allocations (else None), the
    bytes one sample takes in a batch (``sample_bytes``) of a dataset of ``dataset_len`` samples (None: a stream with
    no length), and the pages the training process faulted in over the stage-timed steps (None in a profile stored
    before they were read), and the CPU the machine's other processes used over those steps, beside the training
    process's threads (``cpu``; None in a profile stored before it was read), the implementations (for_loop, foreach,
    fused) the pipeline's optimizer runs here (``optimizer_options``; None in a profile stored before they were
    read), the implementation the optimizer's default runs here (``optimizer_default``, as the inspection's
    ``PipelineFacts`` holds it; None where it was not seen, or in a profile stored before it was read), and the
    dimensions of a batch's input tensor (``input_ndim``: None where it is no tensor, or in a profile stored before it
    was read); ``repeats_in_workers``: the dataset is a stream that gives every DataLoader worker the same samples
    (``pipeline/streams.py``)."""

    stages: StageTiming
    memory: MemoryTrend
    gc: GcPauses
    operators: OperatorProfile
    hotspots: Hotspots
    sample_bytes: int
    dataset_len: int | None
    cuda_allocations: list[CudaAllocation] | None = None
    faults: PageFaults | None = None
    cpu: CpuLoad | None = None
    optimizer_options: list[str] | None = None
    input_ndim: int | None = None
    repeats_in_workers: bool = False
    optimizer_default: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        allocations, faults, cpu = data.get("cuda_allocations"), data.get("faults"), data.get("cpu")
        return cls(
            stages=StageTiming.from_dict(data["stages"]),
            memory=MemoryTrend.from_dict(data["memory"]),
            gc=GcPauses.from_dict(data["gc"]),
            operators=OperatorProfile.from_dict(data["operators"]),
            hotspots=Hotspots.from_dict(data["hotspots"]),
            sample_bytes=data["sample_bytes"],
            dataset_len=data["dataset_len"],
            cuda_allocations=[CudaAllocation(**a) for a in allocations] if allocations is not None else None,
            faults=PageFaults.from_dict(faults) if faults is not None else None,
            cpu=CpuLoad.from_dict(cpu) if cpu is not None else None,
            optimizer_options=data.get("optimizer_options"),
            input_ndim=data.get("input_ndim"),
            repeats_in_workers=data.get("repeats_in_workers", False),
            optimizer_default=data.get("optimizer_default"),
        )
