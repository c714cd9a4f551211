"""A profiling run, in a trial subprocess: one configuration's training steps taken apart, never timed for the
tuner. Its phases run one after another on one pipeline, each apart from the others so that none distorts
another's figures: warm-up, stage timing (garbage collection, page faults and the machine's CPU watched), memory
after each of as many steps, a torch.profiler trace, on a GPU the largest allocations, then loading alone under
cProfile (which slows it, so it runs last and times nothing). Under gradient accumulation every phase that trains
runs whole cycles of micro-batches, each with its optimizer step."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from autotune.knobs import whole_cycles
from autotune.measure.cuda_memory import largest_cuda_allocations
from autotune.measure.gc_pauses import GcWatch
from autotune.measure.gpu import synchronize
from autotune.measure.growth import MemoryTrendRecorder
from autotune.measure.hotspots import collect_hotspots
from autotune.measure.loading import Instrumented, InstrumentedData, InstrumentedStream
from autotune.measure.measurement import SystemReport
from autotune.measure.page_faults import FaultWatch
from autotune.measure.profiling import CpuLoad, MemoryTrend, ProfilePlan, ProfileResult
from autotune.measure.stages import EpochCounter, time_stages
from autotune.measure.system import CpuUsageMeter
from autotune.measure.trace import trace_steps
from autotune.pipeline.build import Pipeline
from autotune.pipeline.inspect import input_ndim, optimizer_facts
from autotune.pipeline.setup import Trainer
from autotune.pipeline.streams import dataset_length, is_stream, repeats_in_workers

# Steps run with CUDA's allocations recorded (rounded up to a whole cycle under gradient accumulation, as ``_train``
# runs steps: a cycle's allocations, its optimizer step's included).
_ALLOCATION_STEPS = 2


def run_profile(
    pipeline: Pipeline,
    knobs: dict[str, Any],
    device: torch.device,
    plan: ProfilePlan,
    effective_batch_size: int | None = None,
) -> ProfileResult:
    """Profile ``pipeline`` with ``knobs`` applied on ``device`` as ``plan`` says, in this process."""
    repeats = repeats_in_workers(pipeline.dataset)  # before this process reads it, as the inspection does
    data = (InstrumentedStream if is_stream(pipeline.dataset) else InstrumentedData)(
        pipeline.dataset, pipeline.collate_fn
    )
    trainer = Trainer(replace(pipeline, dataset=data, collate_fn=data.collate), knobs, device, effective_batch_size)
    workers = knobs["num_workers"]
    epochs = EpochCounter(trainer.loader())  # marks the timed steps that began an epoch (workers start again there)
    batches = trainer.batches(epochs)
    try:
        first = _train(trainer, batches, plan.warmup_steps)
        meter = CpuUsageMeter(os.getpid())  # as a trial reads its window: the machine's cores and this process tree's
        meter.start()
        with GcWatch() as watch, FaultWatch() as faulting:
            stages = time_stages(trainer, batches, plan.steps, device, workers, plan.min_time_s, plan.max_steps, epochs)
        usage = meter.stop()
        system = SystemReport(usage.total_percent, usage.per_core_percent, usage.tree_cores)
        cpu = CpuLoad(system, threads=torch.get_num_threads())  # the compute threads, as the num_threads knob left them
        memory = _memory_trend(trainer, batches, plan.steps, device)
        operators = trace_steps(trainer, batches, device, plan.trace_steps, Path(plan.trace_file))
        allocations = None
        if device.type == "cuda":
            allocations = largest_cuda_allocations(lambda: _train(trainer, batches, _ALLOCATION_STEPS), device)
    finally:
        batches.close()
    data.profile = True  # before the loader below starts its workers, which copy it
    profiled = trainer.batches()
    try:
        hotspots = collect_hotspots(profiled, plan.hot_batches, workers)
    finally:
        profiled.close()
    implementations = optimizer_facts(pipeline.optimizer_factory, str(device))
    return ProfileResult(
        stages=stages,
        memory=memory,
        gc=watch.pauses,
        operators=operators,
        hotspots=hotspots,
        sample_bytes=_bytes(first.batch) // first.samples,
        dataset_len=dataset_length(pipeline.dataset),
        cuda_allocations=allocations,
        faults=faulting.over(stages.steps),
        cpu=cpu,
        optimizer_options=sorted(implementations.options),
        input_ndim=input_ndim(first.batch),
        repeats_in_workers=repeats,
        optimizer_default=implementations.default,
    )


def _memory_trend(trainer: Trainer, batches: Iterator[Instrumented], steps: int, device: torch.device) -> MemoryTrend:
    """Memory after each of ``steps`` untimed steps, apart from the timed ones: the DataLoader's workers go on
    loading while it is read (PSS: milliseconds a process), which would hand a timed step batches loaded for free.

    Under gradient accumulation each step is a whole cycle, so that memory is read at the same point of every cycle:
    the gradients live from a cycle's first backward pass to its optimizer step (freed there with set_to_none), and
    readings within cycles would rise and fall by their size, moving the leak rule's line."""
    memory = MemoryTrendRecorder(device)
    for _ in range(steps):
        _train(trainer, batches, 1)
        memory.read()
    return replace(memory.trend(), steps_apart=trainer.accumulation_steps)


def _train(trainer: Trainer, batches: Iterator[Instrumented], steps: int) -> Instrumented:
    """``steps`` training steps (at least one), untimed, rounded up to whole cycles of ``trainer.accumulation_steps``
    micro-batches, so that they hold an optimizer step and the allocations of a whole cycle (a warm-up without one
    would leave the optimizer's first, its lazy state and compiling, to the timed steps); the last batch loaded."""
    for _ in range(whole_cycles(max(1, steps), trainer.accumulation_steps)):
        item = next(batches)
        trainer.train_step(trainer.to_device(item.batch))
    synchronize(trainer.setup.device)
    return item


def _bytes(batch: Any) -> int:
    return sum(leaf.nbytes for leaf in tree_leaves(batch) if isinstance(leaf, torch.Tensor))
