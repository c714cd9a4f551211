"""Where a training step's time goes, stage by stage, over a sample of steps of a profiling run.

The training process's stages are read off its clock: waiting for the next batch, the copy to the device (with the
conversion of image inputs to the model's memory layout, channels_last's, which follows it), the model's forward
pass (its forward hooks), the optimizer step (its step hooks) and, between them, the loss and the backward pass.
The data pipeline's stages, fetching samples and collating them, are timed where they run, worker or training
process, and arrive with each batch (``autotune.measure.loading``). On a GPU every stage boundary waits for the
device, so that each stage holds its own device time: the stages then run one after another, not overlapped as in
training, which is why no figure the tuner ranks comes from a profiling run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import torch

from autotune.measure.gpu import synchronize
from autotune.measure.loading import Instrumented
from autotune.measure.profiling import StageTiming


class StepParts(Protocol):
    """What stage timing needs of a training loop (``pipeline.setup.Trainer`` is one)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    # Batches a cycle of gradient accumulation takes, the optimizer stepping on its last (1: every batch a step).
    accumulation_steps: int

    def to_device(self, batch: Any) -> Any: ...

    def train_step(self, batch: Any) -> torch.Tensor: ...


class EpochCounter:
    """A DataLoader (``loader``) whose epochs are counted: each pass over it (``iter``, as a training loop's ``for
    batch in loader`` and ``Trainer.batches`` begin one) adds one to ``begun``. Pass it where the loader goes."""

    def __init__(self, loader: Iterable) -> None:
        self.loader, self.begun = loader, 0

    def __iter__(self) -> Iterator:
        self.begun += 1
        return iter(self.loader)


def time_stages(
    parts: StepParts,
    batches: Iterator[Instrumented],
    steps: int,
    device: torch.device,
    num_workers: int,
    min_time_s: float = 0.0,
    max_steps: int = 0,
    epochs: EpochCounter | None = None,
) -> StageTiming:
    """Run ``steps`` training steps on ``batches`` (from a DataLoader with ``num_workers`` workers), more until they
    took ``min_time_s`` or ran ``max_steps``, and time each stage, nothing between the steps that a training loop
    would not run. ``epochs``: the DataLoader ``batches`` pass over, counted, to mark the steps whose batch began an
    epoch (``StageTiming.epoch_starts``; None without it: unknown).

    The steps are whole cycles of ``parts.accumulation_steps`` (``max_steps`` rounded up to one): under gradient
    accumulation a step is a micro-batch and the optimizer steps once a cycle, so a sample that ends inside a cycle
    holds more or fewer optimizer steps than training does for its micro-batches, and the optimizer's share reads
    wrong."""
    marks = _Marks(device)
    keys = ("wait", "transfer", "forward", "optimizer", "step", "fetch", "collate")
    columns: dict[str, list[float]] = {key: [] for key in keys}
    samples, timed = 0, columns["step"]  # what making each batch cost is kept, not the batch: it would stay in memory
    starts: list[int] = []
    cycle = parts.accumulation_steps
    with marks.hooked(parts.model, parts.optimizer):
        start = time.perf_counter()
        while (
            len(timed) < steps
            or (len(timed) < max_steps and time.perf_counter() - start < min_time_s)
            or len(timed) % cycle
        ):
            begun = epochs.begun if epochs is not None else 0
            before = time.perf_counter()
            item = next(batches)
            ready = time.perf_counter()
            if epochs is not None and epochs.begun != begun:
                starts.append(len(timed))
            batch = parts.to_device(item.batch)
            synchronize(device)
            transferred = time.perf_counter()
            marks.reset()
            parts.train_step(batch)
            synchronize(device)
            done = time.perf_counter()
            for key, value in (
                ("wait", ready - before),
                ("transfer", transferred - ready),
                ("forward", marks.forward_s),
                ("optimizer", marks.optimizer_s),
                ("step", done - transferred),
                ("fetch", item.fetch_s),
                ("collate", item.collate_s),
            ):
                columns[key].append(value)
            samples = samples or item.samples
        wall_s = time.perf_counter() - start
    return StageTiming(
        steps=len(timed),
        batch_size=samples,
        num_workers=num_workers,
        wall_s=wall_s,
        wait_s=columns["wait"],
        transfer_s=columns["transfer"],
        forward_s=columns["forward"],
        optimizer_s=columns["optimizer"],
        step_s=columns["step"],
        fetch_s=columns["fetch"],
        collate_s=columns["collate"],
        epoch_starts=starts if epochs is not None else None,
    )


class _Marks:
    """The forward pass's and the optimizer step's time within one training step, read by hooks (summed where the
    step runs the model or the optimizer more than once)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.forward_s = self.optimizer_s = 0.0
        self._since = 0.0

    def reset(self) -> None:
        self.forward_s = self.optimizer_s = 0.0

    @contextmanager
    def hooked(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer):
        handles = [
            model.register_forward_pre_hook(lambda *_: self._open()),
            model.register_forward_hook(lambda *_: self._close("forward_s")),
            optimizer.register_step_pre_hook(lambda *_: self._open()),
            optimizer.register_step_post_hook(lambda *_: self._close("optimizer_s")),
        ]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    def _open(self) -> None:
        synchronize(self.device)
        self._since = time.perf_counter()

    def _close(self, stage: str) -> None:
        synchronize(self.device)
        setattr(self, stage, getattr(self, stage) + time.perf_counter() - self._since)
