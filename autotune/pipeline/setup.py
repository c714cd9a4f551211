"""A pipeline with knobs applied: the DataLoader, the optimizer and one training step."""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.knobs import TrainingSetup, apply_knobs
from autotune.pipeline.build import Pipeline


class Trainer:
    """Runs training steps of ``pipeline`` with ``knobs`` applied on ``device``.

    With ``effective_batch_size`` set, each batch is a micro-batch: gradients of
    ``effective_batch_size // batch_size`` micro-batches are accumulated before each optimizer step,
    so the model trains as it would with the effective batch.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        knobs: dict[str, Any],
        device: torch.device,
        effective_batch_size: int | None = None,
    ) -> None:
        self.pipeline = pipeline
        setup = TrainingSetup(model=pipeline.model.to(device), device=device)
        apply_knobs(knobs, setup)
        self.setup = setup
        self.model = setup.model
        self.optimizer = pipeline.optimizer_factory(pipeline.model.parameters(), **setup.optimizer_kwargs)
        self.accumulation_steps = (effective_batch_size or knobs["batch_size"]) // knobs["batch_size"]
        self._micro_steps = 0
        self.model.train()

    def loader(self) -> DataLoader:
        """A shuffling DataLoader with the knobs' settings; full batches only, so shapes stay fixed."""
        return DataLoader(
            self.pipeline.dataset,
            shuffle=True,
            drop_last=True,
            collate_fn=self.pipeline.collate_fn,
            **self.setup.loader_kwargs,
        )

    def batches(self) -> Iterator[Any]:
        """Batches without end from one DataLoader, iterated epoch after epoch as a training loop does: with
        ``persistent_workers`` its workers serve every epoch, without it they restart at each epoch's start.

        A DataLoader worker killed by a signal raises WorkerKilledError naming the signal.
        """
        loader = self.loader()
        while True:
            yielded = False
            epoch = iter(loader)
            while True:
                try:
                    batch = next(epoch)
                except StopIteration:
                    break
                except RuntimeError as exc:
                    killed_by = _worker_kill_signal(epoch)
                    if killed_by:
                        raise WorkerKilledError(killed_by) from exc
                    raise
                yielded = True
                yield batch
            if not yielded:
                raise ValueError("the DataLoader produced no batch: batch_size is larger than the dataset")

    def to_device(self, batch: Any) -> Any:
        """The batch on the training device, image inputs in the knobs' memory layout."""
        return self.setup.to_device(batch)

    def train_step(self, batch: Any, eager: bool = False) -> torch.Tensor:
        """Forward and backward on a batch already on the device, and the optimizer step once every
        ``accumulation_steps`` batches; returns the batch's loss.

        ``eager`` runs the uncompiled model (same parameters), e.g. for counting FLOPs.
        """
        setup = self.setup
        model = self.pipeline.model if eager else self.model
        with torch.autocast(setup.device.type, dtype=setup.autocast_dtype, enabled=setup.autocast_dtype is not None):
            loss = self._loss(model, batch)
        scaled = loss / self.accumulation_steps if self.accumulation_steps > 1 else loss
        self._micro_steps += 1
        stepping = self._micro_steps % self.accumulation_steps == 0
        if setup.grad_scaler is not None:
            setup.grad_scaler.scale(scaled).backward()
            if stepping:
                setup.grad_scaler.step(self.optimizer)
                setup.grad_scaler.update()
        else:
            scaled.backward()
            if stepping:
                self.optimizer.step()
        if stepping:
            self.optimizer.zero_grad(set_to_none=setup.zero_grad_to_none)
        return loss

    def reference_loss(self, batch: Any) -> float:
        """The loss of the uncompiled model in fp32 on ``batch``, without gradients: what the first
        training step's loss should be, whatever the precision and compile knobs."""
        with torch.no_grad():
            return float(self._loss(self.pipeline.model, batch))

    def _loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        if self.pipeline.step_fn is not None:
            return self.pipeline.step_fn(model, batch, self.pipeline.loss_fn)
        inputs, targets = batch
        return self.pipeline.loss_fn(model(inputs), targets)


def loss_problem(loss: float, reference: float | None, tolerance: float) -> str | None:
    """What is wrong with a training loss: not finite, or further than ``tolerance`` (relative) from
    ``reference``, the fp32 eager loss (None: finiteness only). None when it is fine."""
    if not math.isfinite(loss):
        return f"the loss is {loss}, not a finite number"
    if reference is None or not math.isfinite(reference):
        return None
    difference = abs(loss - reference) / max(abs(reference), 1e-6)
    if difference > tolerance:
        return (
            f"the first step's loss {loss:.6g} differs from the fp32 eager loss {reference:.6g} by "
            f"{difference:.3g} (relative), more than measure.loss_tolerance={tolerance:g}"
        )
    return None


class WorkerKilledError(RuntimeError):
    """A DataLoader worker process was killed by a signal (SIGKILL: most likely the kernel's OOM killer)."""

    def __init__(self, signal_name: str) -> None:
        self.signal_name = signal_name
        super().__init__(f"a DataLoader worker was killed by {signal_name}")


def _worker_kill_signal(epoch: Iterator[Any]) -> str | None:
    """The signal that killed one of the DataLoader iterator's workers, if one was killed."""
    for worker in getattr(epoch, "_workers", []):  # private to DataLoader; absent when num_workers=0
        if worker.exitcode is not None and worker.exitcode < 0:
            return signal.Signals(-worker.exitcode).name
    return None
