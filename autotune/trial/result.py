"""What goes into a trial subprocess and what comes out: plain, JSON-serialisable data."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any

from autotune.measure.harness import Timing, WindowPlan
from autotune.measure.memory import MemoryPeak
from autotune.pipeline.spec import PipelineSpec


class FailureKind(str, Enum):
    """Why a trial produced no measurement."""

    EXCEPTION = "exception"
    OUT_OF_MEMORY = "out_of_memory"
    SIGNAL = "signal"
    TIMEOUT = "timeout"
    NO_RESULT = "no_result"


@dataclass(frozen=True)
class Failure:
    kind: FailureKind
    message: str

    def __str__(self) -> str:
        return f"{self.kind.value}: {self.message}"


@dataclass(frozen=True)
class TrialRequest:
    """Everything a trial subprocess needs: the pipeline, the knob values and how to measure."""

    pipeline: PipelineSpec
    knobs: dict[str, Any]
    device: str
    plan: WindowPlan
    memory_interval_s: float

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "pipeline": self.pipeline.to_dict()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRequest:
        return cls(
            pipeline=PipelineSpec.from_dict(data["pipeline"]),
            knobs=data["knobs"],
            device=data["device"],
            plan=WindowPlan(**data["plan"]),
            memory_interval_s=data["memory_interval_s"],
        )


@dataclass(frozen=True)
class TrialResult:
    """One trial's outcome: a measurement, or a failure with its reason. ``wall_s`` is the whole trial."""

    knobs: dict[str, Any]
    timing: Timing | None = None
    memory: MemoryPeak | None = None
    cuda_peak_mb: float | None = None
    failure: Failure | None = None
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def peak_memory_mb(self) -> float | None:
        return self.memory.peak_mb if self.memory else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        if self.failure:
            data["failure"] = {"kind": self.failure.kind.value, "message": self.failure.message}
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        return cls(
            knobs=data["knobs"],
            timing=Timing(**data["timing"]) if data.get("timing") else None,
            memory=MemoryPeak(**data["memory"]) if data.get("memory") else None,
            cuda_peak_mb=data.get("cuda_peak_mb"),
            failure=Failure(FailureKind(data["failure"]["kind"]), data["failure"]["message"])
            if data.get("failure")
            else None,
            wall_s=data.get("wall_s", 0.0),
        )

    def with_wall_time(self, wall_s: float) -> TrialResult:
        return TrialResult(self.knobs, self.timing, self.memory, self.cuda_peak_mb, self.failure, wall_s)
