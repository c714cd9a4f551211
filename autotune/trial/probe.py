"""The differential probe, run in a trial subprocess: each loader setting timed alone, each compute
setting timed on a cached batch; a setting that runs out of memory is recorded as such and the others are still
timed. Its plan and result are plain, JSON-serialisable data."""

from __future__ import annotations

import copy
import gc
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, Literal

import torch
from torch.utils.data import DataLoader

from autotune.measure.differential import loader_throughput, step_throughput
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer
from autotune.trial.exceptions import exception_text, is_out_of_memory

_DEFAULT_THREADS = torch.get_num_threads()


@dataclass(frozen=True)
class ProbePlan:
    """Loader settings ({batch_size, num_workers}) and compute settings (complete knob values) to time, each for
    ``seconds``; a compute setting after ``warmup_steps`` untimed steps, for ``min_steps`` steps at least.

    The defaults are the shortest measured to agree with a longer probe as well as that one agrees with itself
    (``benchmarks/probe_timing.py``, docs/benchmarks.md section 9): the probe steers, the trials measure."""

    loaders: list[dict[str, Any]]
    computes: list[dict[str, Any]]
    seconds: float = 0.25
    warmup_steps: int = 1
    min_steps: int = 2


Half = Literal["loader", "compute"]


@dataclass(frozen=True)
class ProbeOutOfMemory:
    """A setting of the plan that ran out of memory: its ``half`` ("loader": ``ProbePlan.loaders``, "compute":
    ``ProbePlan.computes``), its index there, and the error, on one line."""

    half: Half
    index: int
    message: str


@dataclass(frozen=True)
class ProbeResult:
    """Samples/s of each loader setting alone and of each compute setting on a cached batch, in plan order: None
    for a setting that ran out of memory, which ``out_of_memory`` lists with its error."""

    loader_throughputs: list[float | None] = field(default_factory=list)
    compute_throughputs: list[float | None] = field(default_factory=list)
    out_of_memory: list[ProbeOutOfMemory] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        out_of_memory = [ProbeOutOfMemory(**entry) for entry in data.get("out_of_memory", [])]
        return cls(data["loader_throughputs"], data["compute_throughputs"], out_of_memory)


def probe_plan_from_dict(data: dict[str, Any] | None) -> ProbePlan | None:
    return ProbePlan(**data) if data else None


def run_probe(
    pipeline: Pipeline, plan: ProbePlan, device: torch.device, effective_batch_size: int | None
) -> ProbeResult:
    """Time every setting of ``plan`` on ``pipeline`` in this process; one that runs out of memory is recorded
    (``ProbeResult.out_of_memory``) and the others are timed all the same."""
    guard = _OutOfMemoryGuard(device)
    loaders = [
        guard.time("loader", index, partial(_time_loader, pipeline, setting, plan.seconds))
        for index, setting in enumerate(plan.loaders)
    ]
    cached: dict[int, Any] = {}

    def compute(knobs: dict[str, Any]) -> float:
        size = knobs["batch_size"]
        if size not in cached:
            cached[size] = next(iter(_loader(pipeline, size, 0)))
        return _time_compute(pipeline, knobs, cached[size], device, plan, effective_batch_size)

    # The first model step timed in a process is slow (allocator, oneDNN primitives, lazy imports): time the
    # anchor once untimed, so it does not read low and inflate every factor measured against it.
    guard.time("compute", None, partial(compute, plan.computes[0]))
    computes = [guard.time("compute", index, partial(compute, knobs)) for index, knobs in enumerate(plan.computes)]
    return ProbeResult(loaders, computes, guard.out_of_memory)


class _OutOfMemoryGuard:
    """Runs the probe's timings one after another, an out of memory recorded with its setting instead of raised."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.out_of_memory: list[ProbeOutOfMemory] = []

    def time(self, half: Half, index: int | None, timing: Callable[[], float]) -> float | None:
        """``timing()``, or None where it ran out of memory (recorded unless ``index`` is None: an untimed run)."""
        try:
            return timing()
        except Exception as exc:
            if not is_out_of_memory(exc):
                raise
            if index is not None:
                self.out_of_memory.append(ProbeOutOfMemory(half, index, exception_text(exc)))
        release_memory(self.device)  # here, once the exception and the tensors its traceback held are gone
        return None


def release_memory(device: torch.device) -> None:
    """Free what a setting that ran out of memory left behind: objects in reference cycles and, on a GPU, the
    blocks CUDA's caching allocator keeps, so the next setting has the memory the earlier ones had."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _loader(pipeline: Pipeline, batch_size: int, num_workers: int) -> DataLoader:
    return DataLoader(
        pipeline.dataset,
        batch_size=batch_size,
        num_workers=num_workers,
        shuffle=True,
        drop_last=True,
        collate_fn=pipeline.collate_fn,
    )


def _time_loader(pipeline: Pipeline, setting: dict[str, Any], seconds: float) -> float:
    return loader_throughput(_loader(pipeline, setting["batch_size"], setting["num_workers"]), seconds)


def _time_compute(
    pipeline: Pipeline, knobs: dict[str, Any], batch: Any, device: torch.device, plan: ProbePlan, effective: int | None
) -> float:
    """The model step alone with ``knobs``, on a copy of the model so settings do not leak between runs."""
    fresh = replace(pipeline, model=copy.deepcopy(pipeline.model))
    try:
        trainer = Trainer(fresh, knobs, device, effective)
        on_device = trainer.to_device(batch)
        step = partial(trainer.train_step, on_device)
        return step_throughput(step, knobs["batch_size"], device, plan.seconds, plan.warmup_steps, plan.min_steps)
    finally:
        torch.set_num_threads(_DEFAULT_THREADS)  # the num_threads knob is process-wide, even where the step raised
