"""A pipeline with knobs applied: the DataLoader, the optimizer and one training step."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.batches import to_device
from autotune.knobs import TrainingSetup, apply_knobs
from autotune.measure.system import signal_name
from autotune.pipeline.build import Pipeline
from autotune.pipeline.streams import is_stream, shuffles

# Where the fp32 eager loss draws random numbers from torch's default generator (dropout, noise drawn in the model or
# the step) and the step draws other numbers than eager's of the same seed (compiled: ``redraws_random``), the
# reference is drawn under this many seeds, and the step held to their mean, allowed their range beyond
# measure.loss_tolerance (``loss_problem``). The range of eight draws spans ~2.8 standard deviations.
REFERENCE_SEEDS = 8
# A trial whose loss scaler skipped more than this share of its window's optimizer steps measured no training.
MAX_SKIPPED_SHARE = 0.5


@dataclass(frozen=True)
class ReferenceLoss:
    """The fp32 eager loss a first training step is checked against: under the step's seed or, where the step draws
    other random numbers than it and it draws any, the mean of REFERENCE_SEEDS seeds' and their ``spread`` (the
    largest less the smallest; None where it is the one seed's)."""

    loss: float
    spread: float | None = None


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
        self.optimizer_steps = 0
        self._micro_steps = 0
        self.model.train()

    def loader(self) -> DataLoader:
        """A DataLoader with the knobs' settings, shuffling where the dataset is map-style (``shuffles``); full batches
        only, so shapes stay fixed."""
        return DataLoader(
            self.pipeline.dataset,
            shuffle=shuffles(self.pipeline.dataset),
            drop_last=True,
            collate_fn=self.pipeline.collate_fn,
            **self.setup.loader_kwargs,
        )

    def batches(self, loader: DataLoader | None = None) -> Iterator[Any]:
        """Batches without end from one DataLoader (``loader``, else a new ``loader()``), iterated epoch after epoch
        as a training loop does: with ``persistent_workers`` its workers serve every epoch, without it they restart
        at each epoch's start.

        A DataLoader worker killed by a signal raises WorkerKilledError naming the signal.
        """
        loader = self.loader() if loader is None else loader
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
                split = is_stream(self.pipeline.dataset) and self.setup.loader_kwargs.get("num_workers")
                share = " (a stream: than each worker's share of it)" if split else ""
                raise ValueError(f"the DataLoader produced no batch: batch_size is larger than the dataset{share}")

    def to_device(self, batch: Any) -> Any:
        """The batch on the training device, image inputs in the knobs' memory layout."""
        return to_device(batch, self.setup)

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
            self.optimizer_steps += 1
        return loss

    def scale_reading(self) -> ScaleReading | None:
        """The loss scaler's scale after the optimizer steps so far; None without a scaler (fp16 only).

        On CUDA the read waits for the device: take it before the timed window (a warm-up step waits anyway; a
        drained step, ``StepRecorder.drain``, is untimed too), or after it, never inside it.
        """
        scaler = self.setup.grad_scaler
        if scaler is None:
            return None
        return ScaleReading(scaler.get_scale(), self.optimizer_steps, scaler.get_backoff_factor())

    def reference_loss(self, batch: Any, seed: int, redrawn: bool = False) -> ReferenceLoss:
        """The loss of the uncompiled model in fp32 on ``batch`` under ``seed``, without gradients: what the first
        training step's loss should be, whatever the precision and compile knobs. Where the step draws other random
        numbers (``redrawn``) and this loss draws any (the default generator moved), it is drawn under
        REFERENCE_SEEDS seeds from ``seed`` on: their mean and range."""
        device = self.setup.device
        torch.manual_seed(seed)
        before = _random_state(device)
        losses = [self._fp32_eager_loss(batch)]
        if not redrawn or all(map(torch.equal, before, _random_state(device))):
            return ReferenceLoss(losses[0])
        for other in range(seed + 1, seed + REFERENCE_SEEDS):
            torch.manual_seed(other)
            losses.append(self._fp32_eager_loss(batch))
        return ReferenceLoss(statistics.fmean(losses), max(losses) - min(losses))

    def _fp32_eager_loss(self, batch: Any) -> float:
        with torch.no_grad():
            return float(self._loss(self.pipeline.model, batch))

    def _loss(self, model: torch.nn.Module, batch: Any) -> torch.Tensor:
        if self.pipeline.step_fn is not None:
            loss, source = self.pipeline.step_fn(model, batch, self.pipeline.loss_fn), "pipeline.step"
        else:
            inputs, targets = batch
            loss, source = self.pipeline.loss_fn(model(inputs), targets), "pipeline.loss"
        if not isinstance(loss, torch.Tensor):
            raise TypeError(
                f"{source} returned a {type(loss).__name__}, not the loss tensor: return the loss alone, as a tensor "
                "(autotune calls backward() and steps the optimizer)"
            )
        if self._micro_steps == 0:  # the first step shows what a step returns; later ones, off the timed path
            self._check_loss(loss, source)
        return loss

    @staticmethod
    def _check_loss(loss: torch.Tensor, source: str) -> None:
        """What backward() would refuse of ``loss`` in torch's words, said in the pipeline's (``source``)."""
        if loss.numel() != 1:
            raise ValueError(
                f"{source} returned a loss of shape {tuple(loss.shape)}, not one number: reduce it to one "
                "(reduction='none' keeps a loss per sample: take their mean)"
            )
        if not loss.is_floating_point():  # backward() takes a real floating-point loss alone
            raise ValueError(
                f"{source} returned a loss of dtype {loss.dtype}, not floating point: an integer tensor carries no "
                "gradient; return the loss as computed (a float tensor), not rounded or cast (autotune calls "
                "backward())"
            )
        if torch.is_grad_enabled() and not loss.requires_grad:
            raise ValueError(
                f"{source} returned a loss that does not require grad: return it as computed, not detached (.detach(), "
                "torch.no_grad()), from a model with parameters that train (autotune calls backward())"
            )


def loss_problem(loss: float, reference: float | None, tolerance: float, spread: float | None = None) -> str | None:
    """What is wrong with a training loss: not finite, or further from ``reference``, the fp32 eager loss (None:
    finiteness only), than ``tolerance`` of it plus ``spread``, the range its own random numbers move it over
    (``ReferenceLoss``). None when it is fine."""
    if not math.isfinite(loss):
        return f"the loss is {loss}, not a finite number"
    if reference is None or not math.isfinite(reference):
        return None
    scale = max(abs(reference), 1e-6)
    difference = abs(loss - reference)
    if difference <= tolerance * scale + (spread or 0.0):
        return None
    problem = (
        f"the first step's loss {loss:.6g} differs from the fp32 eager loss {reference:.6g} by "
        f"{difference / scale:.3g} (relative), more than measure.loss_tolerance={tolerance:g}"
    )
    if spread is None:
        return problem
    return (
        f"{problem} beyond the {spread:.3g} the loss's own random numbers move it (the fp32 loss is the mean of "
        f"{REFERENCE_SEEDS} seeds', and ranged that far)"
    )


def _random_state(device: torch.device) -> list[torch.Tensor]:
    """The states of the random generators a step on ``device`` draws from: the CPU's, and the device's own."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


@dataclass(frozen=True)
class ScaleReading:
    """A GradScaler's scale after ``steps`` optimizer steps, and its ``backoff_factor``: what a skipped step
    multiplies the scale by (``GradScaler.get_backoff_factor``)."""

    scale: float
    steps: int
    backoff_factor: float


def skipped_steps(before: ScaleReading, after: ScaleReading, left_out: int = 0) -> int:
    """How many of the optimizer steps between two readings, but for the first ``left_out`` of them, the GradScaler
    skipped, at least.

    A skipped step (its gradients overflowed) multiplies the scale by the scaler's backoff factor (``ScaleReading``),
    and only a growth raises it (after growth_interval steps in a row that were not skipped), so a scale lower by
    the backoff factor to the power k means at least k skips. Two reads of the scale at the window's edges count
    this without reading anything inside it, where each read would wait for the device. The first
    ``left_out`` steps after the first read, those a window left out of its start once it had ended
    (``StepRecorder.trimmed_steps``), are not counted: they may hold up to as many of the skips, so the rest are
    the window's own, at least.
    """
    steps = after.steps - before.steps
    if before.scale <= 0:  # a scale at zero stays there: every step's gradients are 0 x inf, not finite, skipped
        return steps - left_out
    lowest = max(after.scale, 2.0**-150)  # a scale at zero fell below float32's smallest, 2**-149
    # Whole backoffs only: a growth among the skips leaves a part of one.
    backoffs = math.floor(math.log(before.scale / lowest) / -math.log(before.backoff_factor) + 1e-9)
    return max(0, min(steps, backoffs) - left_out)


def skipped_problem(skipped: int, steps: int) -> str | None:
    """Why a window whose loss scaler skipped ``skipped`` of its ``steps`` optimizer steps measured no training (more
    than MAX_SKIPPED_SHARE of them skipped), or None."""
    if steps == 0 or skipped <= MAX_SKIPPED_SHARE * steps:
        return None
    return (
        f"the fp16 loss scaler skipped {skipped} of the timed window's {steps} optimizer steps (their gradients "
        "overflowed): a skipped step does no optimizer work, so the window ran faster than training does"
    )


class WorkerKilledError(RuntimeError):
    """A DataLoader worker process was killed by a signal (SIGKILL: most likely the kernel's OOM killer)."""

    def __init__(self, signal_name: str) -> None:
        self.signal_name = signal_name
        super().__init__(f"a DataLoader worker was killed by {signal_name}")


def _worker_kill_signal(epoch: Iterator[Any]) -> str | None:
    """The signal that killed one of the DataLoader iterator's workers, if one was killed."""
    for worker in getattr(epoch, "_workers", []):  # private to DataLoader; absent when num_workers=0
        if worker.exitcode is not None and worker.exitcode < 0:
            return signal_name(-worker.exitcode)
    return None
