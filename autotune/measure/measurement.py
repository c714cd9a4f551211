"""A measurement of a training loop, in sections: timing, memory, compute, system and environment."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar

from autotune.files import write_atomic
from autotune.measure.recorder import Timing


@dataclass(frozen=True)
class MemoryReport:
    """Host memory of the process tree (``metric`` "pss" or "rss"), in MiB: the peak over the whole run
    and the level at the start and end of the timed window (growth there hints at a leak); GPU memory
    from CUDA's allocator statistics and from NVML where available.

    With "pss", pages shared between processes (forked DataLoader workers) count once: the tree's PSS is read
    before the loop and at the window's edges; inside the window, where a PSS read would slow the loop, resident
    sizes are sampled and each process's shared excess from the nearest PSS read is taken off; the training
    process's high-water mark (VmHWM) catches a peak between samples (``autotune.measure.memory``).
    """

    metric: str
    peak_mb: float
    window_start_mb: float
    window_end_mb: float
    samples: int
    cuda_peak_allocated_mb: float | None = None
    cuda_peak_reserved_mb: float | None = None
    nvml_used_peak_mb: float | None = None

    @property
    def window_growth_mb(self) -> float:
        return self.window_end_mb - self.window_start_mb

    @property
    def limiting(self) -> str:
        """Which memory bounds what the run can hold: "gpu" on CUDA (where CUDA's peaks were read), else "host"."""
        return "gpu" if self.cuda_peak_reserved_mb is not None else "host"

    @property
    def limiting_peak_mb(self) -> float:
        """The peak of the limiting memory, the one every memory decision uses: on CUDA the peak CUDA's caching
        allocator reserved (what it holds of the device, so what must fit there; the CUDA context's few hundred MiB
        are not in it), else the process tree's ``peak_mb``."""
        return self.cuda_peak_reserved_mb if self.cuda_peak_reserved_mb is not None else self.peak_mb


@dataclass(frozen=True)
class ComputeReport:
    """FLOPs of one training step per sample, and the FLOP rate achieved in the window; None with a
    ``note`` saying why where they were not counted."""

    flops_per_sample: float | None = None
    achieved_flops_per_s: float | None = None
    note: str | None = None


@dataclass(frozen=True)
class SystemReport:
    """CPU utilisation over the window (machine-wide per core, and cores used by the process tree);
    GPU utilisation from NVML, or None with ``gpu_note`` saying why; ``gpu_other_processes``: the most processes
    outside the measured tree that NVML listed computing on its GPU at once during the window (None: not listed)."""

    cpu_total_percent: float
    cpu_per_core_percent: list[float]
    process_tree_cores: float
    gpu_utilization_percent: float | None = None
    gpu_note: str | None = None
    gpu_other_processes: int | None = None

    # A run is disturbed when its cores were nearly all busy and other processes took this many cores' worth of
    # them on average (a quiet run shows 0.01-0.02: the tuner's own polling). Idle cores used elsewhere took nothing.
    BUSY_OTHERS_CORES: ClassVar[float] = 0.25
    SATURATED_PERCENT: ClassVar[float] = 90.0

    @property
    def busy_cores(self) -> float:
        """Cores' worth of CPU that every process used, of the cores the measured tree may run on."""
        return self.cpu_total_percent / 100 * len(self.cpu_per_core_percent)

    @property
    def other_processes_cores(self) -> float:
        """Cores' worth of CPU that processes outside the measured tree used, of the cores it may run on."""
        return max(0.0, self.busy_cores - self.process_tree_cores)

    @property
    def cores_taken(self) -> bool:
        """Whether other processes competed for the cores during the window."""
        saturated = self.cpu_total_percent >= self.SATURATED_PERCENT
        return saturated and self.other_processes_cores >= self.BUSY_OTHERS_CORES

    @property
    def disturbed(self) -> bool:
        """Whether other processes competed for the cores or shared the GPU during the window, so that its figures
        may be low. Any process on the GPU counts: NVML does not say how much of the GPU each one took."""
        return self.cores_taken or bool(self.gpu_other_processes)


@dataclass(frozen=True)
class Measurement:
    """Everything measured about one run of a training loop, saveable as JSON."""

    name: str
    device: str
    timing: Timing
    memory: MemoryReport
    compute: ComputeReport
    system: SystemReport
    environment: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["memory"]["window_growth_mb"] = self.memory.window_growth_mb
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        memory = {k: v for k, v in data["memory"].items() if k != "window_growth_mb"}
        return cls(
            name=data["name"],
            device=data["device"],
            timing=Timing(**data["timing"]),
            memory=MemoryReport(**memory),
            compute=ComputeReport(**data["compute"]),
            system=SystemReport(**data["system"]),
            environment=data["environment"],
        )

    def save(self, path: str | Path) -> Path:
        return write_atomic(path, json.dumps(self.to_dict(), indent=2))

    @classmethod
    def load(cls, path: str | Path) -> Measurement:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
