"""The differential probe, run in a trial subprocess: each loader setting timed alone, each compute
setting timed on a cached batch. Its plan and result are plain, JSON-serialisable data."""

from __future__ import annotations

import copy
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.measure.differential import loader_throughput, step_throughput
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer

_DEFAULT_THREADS = torch.get_num_threads()


@dataclass(frozen=True)
class ProbePlan:
    """Loader settings ({batch_size, num_workers}) and compute settings (complete knob values) to time,
    each for ``seconds``."""

    loaders: list[dict[str, Any]]
    computes: list[dict[str, Any]]
    seconds: float = 0.5


@dataclass(frozen=True)
class ProbeResult:
    """Samples/s of each loader setting alone and of each compute setting on a cached batch, in plan order."""

    loader_throughputs: list[float] = field(default_factory=list)
    compute_throughputs: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProbeResult:
        return cls(**data)


def probe_plan_from_dict(data: dict[str, Any] | None) -> ProbePlan | None:
    return ProbePlan(**data) if data else None


def run_probe(
    pipeline: Pipeline, plan: ProbePlan, device: torch.device, effective_batch_size: int | None
) -> ProbeResult:
    """Time every setting of ``plan`` on ``pipeline`` in this process."""
    loaders = [_time_loader(pipeline, setting, plan.seconds) for setting in plan.loaders]
    cached: dict[int, Any] = {}
    computes = []
    # The first model step timed in a process is slow (allocator, oneDNN primitives, lazy imports): time the
    # anchor once untimed, so it does not read low and inflate every factor measured against it.
    for knobs in [plan.computes[0], *plan.computes]:
        size = knobs["batch_size"]
        if size not in cached:
            cached[size] = next(iter(_loader(pipeline, size, 0)))
        computes.append(_time_compute(pipeline, knobs, cached[size], device, plan.seconds, effective_batch_size))
    return ProbeResult(loaders, computes[1:])


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
    pipeline: Pipeline, knobs: dict[str, Any], batch: Any, device: torch.device, seconds: float, effective: int | None
) -> float:
    """The model step alone with ``knobs``, on a copy of the model so settings do not leak between runs."""
    fresh = replace(pipeline, model=copy.deepcopy(pipeline.model))
    trainer = Trainer(fresh, knobs, device, effective)
    on_device = trainer.to_device(batch)
    samples = knobs["batch_size"]
    rate = step_throughput(lambda: trainer.train_step(on_device), samples, device, seconds)
    torch.set_num_threads(_DEFAULT_THREADS)  # the num_threads knob is process-wide
    return rate
