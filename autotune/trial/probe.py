"""The differential probe, run in a trial subprocess: each loader setting timed alone, each compute
setting timed on a cached batch (not at other batch sizes where it read far slower at the anchor's:
``ProbePlan.far_slower``); a setting that runs out of memory is recorded as such and the others are still timed,
but for the anchor's DataLoader setting (the plan's first), whose failure ends the probe. Its plan and result:
``trial/result.py``."""

from __future__ import annotations

import copy
import gc
import os
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader

from autotune.measure.differential import LoaderRate, loader_rate, step_throughput
from autotune.measure.system import OthersMeter, tree_cpu_seconds
from autotune.pipeline.build import Pipeline
from autotune.pipeline.setup import Trainer
from autotune.pipeline.streams import shuffles
from autotune.trial.exceptions import exception_text, is_out_of_memory
from autotune.trial.result import Half, ProbeFailure, ProbeOutOfMemory, ProbePlan, ProbeResult

T = TypeVar("T")


def run_probe(
    pipeline: Pipeline, plan: ProbePlan, device: torch.device, effective_batch_size: int | None
) -> ProbeResult:
    """Time every setting of ``plan`` on ``pipeline`` in this process; one that runs out of memory or raises is
    recorded (``ProbeResult.out_of_memory``, ``ProbeResult.failed``) and the others are timed all the same, but
    where the anchor's DataLoader setting (the plan's first) fails: then nothing more is (``_anchor_failed``)."""
    guard = _Guard(device)
    others = OthersMeter()
    loaders: list[LoaderRate | None] = []
    for index, setting in enumerate(plan.loaders):
        loaders.append(guard.time("loader", index, partial(_time_loader, pipeline, setting, plan.seconds)))
        if loaders[0] is None:
            return _anchor_failed(plan, guard)
    others_cores = others.cores()
    rates = [rate.samples_per_s if rate else None for rate in loaders]
    cpu = [rate.cpu_s_per_sample if rate else None for rate in loaders]
    cached: dict[int, Any] = {}
    threads = torch.get_num_threads()  # this process's default, on the cores it is pinned to (study.cpu_sets)

    def compute(knobs: dict[str, Any]) -> float:
        size = knobs["batch_size"]
        if size not in cached:
            cached[size] = next(iter(_loader(pipeline, size, 0)))
        try:
            return _time_compute(pipeline, knobs, cached[size], device, plan, effective_batch_size)
        finally:
            torch.set_num_threads(threads)  # the num_threads knob is process-wide, even where the step raised

    # The first model step timed in a process is slow (allocator, oneDNN primitives, lazy imports): time the
    # anchor once untimed, so it does not read low and inflate every factor measured against it.
    anchor = partial(compute, plan.computes[0])
    guard.time("compute", None, anchor)
    computes: list[float | None] = []
    repeats: list[float | None] = []
    for index, knobs in enumerate(plan.computes):
        if index in plan.anchor_before:  # the anchor around each knob's settings: the probe's drift and noise
            repeats.append(guard.time("compute", None, anchor))
        far_slower = _far_slower(plan, computes, index, [*computes[:1], *repeats])
        computes.append(None if far_slower else guard.time("compute", index, partial(compute, knobs)))
    again = guard.time("compute", None, anchor)  # did the machine's speed hold?
    return ProbeResult(rates, computes, guard.out_of_memory, guard.failed, again, cpu, others_cores, repeats)


def _anchor_failed(plan: ProbePlan, guard: _Guard) -> ProbeResult:
    """The probe of ``plan`` ended where its anchor's DataLoader setting failed, that failure (``guard``'s) its one
    reading: every prediction scales the anchor's timings, so the study fails such a probe whatever else it timed,
    and timing the rest would spend minutes on it (a dataset that raises only in workers, the baseline without)."""
    return ProbeResult(
        [None] * len(plan.loaders),
        [None] * len(plan.computes),
        guard.out_of_memory,
        guard.failed,
        loader_cpu=[None] * len(plan.loaders),
    )


def _far_slower(plan: ProbePlan, timed: list[float | None], index: int, anchor_timings: list[float | None]) -> bool:
    """Whether model step setting ``index`` of ``plan`` (``timed`` up to it) is at a batch size other than the
    anchor's and its own values read more than ``plan.far_slower`` times slower than the anchor's latest timing at
    the anchor's batch size."""
    settings = plan.computes
    anchor = settings[0]
    there = {**settings[index], "batch_size": anchor["batch_size"]}
    if there in (settings[index], anchor) or there not in settings[:index]:
        return False
    rate = timed[settings.index(there)]
    latest = next((timing for timing in reversed(anchor_timings) if timing is not None), None)
    return rate is not None and latest is not None and rate * plan.far_slower < latest


class _Guard:
    """Runs the probe's timings one after another, a setting that runs out of memory or raises recorded with its
    error instead of raised."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.out_of_memory: list[ProbeOutOfMemory] = []
        self.failed: list[ProbeFailure] = []

    def time(self, half: Half, index: int | None, timing: Callable[[], T]) -> T | None:
        """``timing()``, or None where it raised (recorded unless ``index`` is None: an untimed run)."""
        try:
            return timing()
        except Exception as exc:
            if index is not None:
                kind = ProbeOutOfMemory if is_out_of_memory(exc) else ProbeFailure
                (self.out_of_memory if kind is ProbeOutOfMemory else self.failed).append(
                    kind(half, index, exception_text(exc))
                )
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
        shuffle=shuffles(pipeline.dataset),
        drop_last=True,
        collate_fn=pipeline.collate_fn,
    )


def _time_loader(pipeline: Pipeline, setting: dict[str, Any], seconds: float) -> LoaderRate:
    """The loader of ``setting`` alone, and the CPU time a sample took this process and its workers."""
    batch_size = setting["batch_size"]
    loader = _loader(pipeline, batch_size, setting["num_workers"])
    return loader_rate(loader, batch_size, seconds, cpu_seconds=partial(tree_cpu_seconds, os.getpid()))


def _time_compute(
    pipeline: Pipeline, knobs: dict[str, Any], batch: Any, device: torch.device, plan: ProbePlan, effective: int | None
) -> float:
    """The model step alone with ``knobs``, on a copy of the model so settings do not leak between runs; with
    micro-batches accumulated up to ``effective``, over whole optimizer steps (the fresh trainer starts a cycle)."""
    fresh = replace(pipeline, model=copy.deepcopy(pipeline.model))
    trainer = Trainer(fresh, knobs, device, effective)
    on_device = trainer.to_device(batch)
    step = partial(trainer.train_step, on_device)
    return step_throughput(
        step,
        knobs["batch_size"],
        device,
        plan.seconds,
        plan.warmup_steps,
        plan.min_steps,
        step_multiple=trainer.accumulation_steps,
    )
