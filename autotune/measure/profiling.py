"""What a profiling run is asked to do and what it found: plain, JSON-serialisable records (the run itself:
``autotune.trial.profiling``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.measure.cuda_memory import CudaAllocation
from autotune.measure.gc_pauses import GcPauses
from autotune.measure.growth import MemoryTrend
from autotune.measure.hotspots import Hotspots
from autotune.measure.page_faults import PageFaults
from autotune.measure.stages import StageTiming
from autotune.measure.trace import OperatorProfile


@dataclass(frozen=True)
class ProfilePlan:
    """A profiling run: ``warmup_steps`` untimed steps, then ``steps`` steps timed stage by stage (memory and
    garbage collection watched), ``trace_steps`` steps under torch.profiler (its trace written to ``trace_file``),
    and ``hot_batches`` batches loaded under cProfile."""

    trace_file: str
    steps: int = 30
    trace_steps: int = 5
    hot_batches: int = 10
    warmup_steps: int = 5

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ProfilePlan | None:
        return cls(**data) if data else None


@dataclass(frozen=True)
class ProfileResult:
    """A profiling run's findings: each stage's time, memory after each step, the garbage collector's pauses, the
    profiler's operators, the data pipeline's hot functions, on a GPU its largest allocations (else None), the
    bytes one sample takes in a batch (``sample_bytes``) of a dataset of ``dataset_len`` samples, and the pages the
    training process faulted in over the stage-timed steps (None in a profile stored before they were read)."""

    stages: StageTiming
    memory: MemoryTrend
    gc: GcPauses
    operators: OperatorProfile
    hotspots: Hotspots
    sample_bytes: int
    dataset_len: int
    cuda_allocations: list[CudaAllocation] | None = None
    faults: PageFaults | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        allocations, faults = data.get("cuda_allocations"), data.get("faults")
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
        )
