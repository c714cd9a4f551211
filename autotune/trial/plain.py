"""The judge of every figure: a training loop as a user writes it, timed with two clock reads.

It shares no measurement code with the harness (no Profiler, no Trainer, no sampler), only the rule of which windows
hold whole epochs (``WindowPlan.whole_epochs``): it builds the pipeline,
applies the knobs as the knobs say, and runs one DataLoader epoch after epoch. After a fixed warm-up (a number of
steps, and on CUDA a second) it counts steps until the window is as long as the harness's would be, reading the
clock after each step as a loop that stops on time does, or, where epochs are short, whole epochs; on a
GPU it waits for the device only at the window's two ends. ``mode=selfcheck`` and ``benchmarks/truth.py`` compare
the harness with it.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.batches import to_device
from autotune.knobs import TrainingSetup, apply_knobs
from autotune.measure.recorder import WindowPlan
from autotune.pipeline.build import Pipeline
from autotune.pipeline.streams import epoch_steps, shuffles
from autotune.trial.result import PlainRun


def run_plain(
    pipeline: Pipeline, knobs: dict[str, Any], device: torch.device, plan: WindowPlan, effective_batch_size: int | None
) -> PlainRun:
    """Train ``pipeline`` with ``knobs`` for at least ``plan.warmup.min_steps`` untimed steps and the device's
    minimum warm-up time (a GPU's clocks ramp up over the first second), then time a window of at least
    ``plan.min_steps`` steps and ``plan.min_time_s`` seconds (at most ``plan.max_time_s``), ending on a whole number
    of optimizer steps where micro-batches accumulate to ``effective_batch_size``.

    Where a window of whole epochs is short enough (``WindowPlan.whole_epochs``, at the pace of the warm-up's steps
    after its first) and micro-batches do not accumulate, the window times whole epochs, from an epoch's
    first batch to the last step of the first epoch that ends past its minimum steps and time: a loader that stalls
    at epoch boundaries, or whose workers deliver in waves within an epoch, then counts its stalls as often as a long
    run does, wherever the warm-up ended.
    """
    setup = TrainingSetup(model=pipeline.model.to(device), device=device)
    apply_knobs(knobs, setup)
    model = setup.model.train()
    optimizer = pipeline.optimizer_factory(pipeline.model.parameters(), **setup.optimizer_kwargs)
    loader = DataLoader(
        pipeline.dataset,
        shuffle=shuffles(pipeline.dataset),
        drop_last=True,
        collate_fn=pipeline.collate_fn,
        **setup.loader_kwargs,
    )
    batch_size = knobs["batch_size"]
    accumulate = (effective_batch_size or batch_size) // batch_size
    # Whole epochs for any loader, workers or not (the harness: only with workers, whose epochs' starts stall): a
    # window of whole epochs is what a long run keeps, and where nothing stalls it reads as the harness's.
    whole_epochs_plan = replace(plan, epoch_steps=epoch_steps(loader), step_multiple=accumulate)

    def loss_of(batch):
        if pipeline.step_fn is not None:
            return pipeline.step_fn(model, batch, pipeline.loss_fn)
        inputs, targets = batch
        return pipeline.loss_fn(model(inputs), targets)

    def finished(timed: int, boundaries: int) -> PlainRun:
        _wait_for(device)
        window_s = time.perf_counter() - start
        return PlainRun(timed * batch_size / window_s, timed * batch_size, timed, window_s, warmup, boundaries)

    warmup_steps, warmup_s = plan.warmup.min_steps, plan.warmup.on(device.type).min_time_s
    warmup, step, start, boundaries, whole_epochs, began = None, 0, None, 0, None, time.perf_counter()
    last, paces = began, []  # the warm-up's step times after its first
    while True:
        if start is None and whole_epochs:
            _wait_for(device)
            warmup, start = step, time.perf_counter()
        elif whole_epochs and step - warmup >= plan.min_steps and time.perf_counter() - start >= plan.min_time_s:
            return finished(step - warmup, boundaries)
        if start is not None:  # an epoch begins inside the window
            boundaries += 1
        for batch in loader:
            batch = to_device(batch, setup)
            with torch.autocast(device.type, dtype=setup.autocast_dtype, enabled=setup.autocast_dtype is not None):
                loss = loss_of(batch)
            if accumulate > 1:
                loss = loss / accumulate
            step += 1
            if setup.grad_scaler is not None:
                setup.grad_scaler.scale(loss).backward()
            else:
                loss.backward()
            if step % accumulate == 0:
                if setup.grad_scaler is not None:
                    setup.grad_scaler.step(optimizer)
                    setup.grad_scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=setup.zero_grad_to_none)
            now = time.perf_counter()
            if start is None:
                if step > 1:
                    paces.append(now - last)
                last = now
                if whole_epochs is None and step >= warmup_steps and now - began >= warmup_s:
                    whole_epochs = whole_epochs_plan.whole_epochs(paces)
                    if not whole_epochs:
                        _wait_for(device)
                        warmup, start = step, time.perf_counter()
            else:
                timed, elapsed = step - warmup, now - start
                # Whole epochs that take longer than foreseen end as any other window from half of max_time_s on.
                past_epochs = not whole_epochs or elapsed >= plan.max_time_s / 2
                long_enough = timed >= plan.min_steps and elapsed >= plan.min_time_s and past_epochs
                if (elapsed >= plan.max_time_s or long_enough) and timed % accumulate == 0:  # whole optimizer steps
                    return finished(timed, boundaries)


def _wait_for(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
