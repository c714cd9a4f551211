"""Time the two halves of a training step apart: the DataLoader alone, and the model step on a cached batch.

This is the differential method of DS-Analyzer (Mohan et al., VLDB 2021): how fast data arrives and how
fast the model consumes it, each measured without the other, say which one limits training.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from autotune.knobs import whole_cycles
from autotune.measure.gpu import synchronize


@dataclass(frozen=True)
class LoaderRate:
    """How fast a DataLoader alone yields samples, and the CPU seconds a sample took its processes meanwhile (None:
    not read): below the seconds a sample takes a worker, loading waits (for files, the network) rather than
    computes, and more workers than cores can overlap the waits."""

    samples_per_s: float
    cpu_s_per_sample: float | None = None


def loader_rate(
    loader: Iterable[Any],
    samples_per_batch: int,
    seconds: float,
    clock: Callable[[], float] = time.perf_counter,
    cpu_seconds: Callable[[], float] | None = None,
) -> LoaderRate:
    """Samples per second ``loader`` yields (``samples_per_batch`` a batch: its batch size, every batch full),
    consumed as fast as it can produce them, timed from its first batch (so worker start-up is not counted) for at
    least ``seconds`` or to the end of the epoch where it runs out; a loader of one batch an epoch is timed over its
    next epoch, as training goes on to it. ``cpu_seconds()``, read at the same two ends while the workers live,
    gives the CPU a sample took (over ``CPU_MIN_WINDOW_S`` at least)."""
    batches = iter(loader)
    if next(batches, None) is None:
        raise ValueError("the DataLoader yields no batch; cannot time it")
    cpu_start = cpu_seconds() if cpu_seconds else None
    start = clock()
    samples = 0
    for _ in range(2):
        for _ in batches:
            samples += samples_per_batch
            elapsed = clock() - start
            if elapsed >= seconds:
                return _rate(samples, elapsed, cpu_seconds, cpu_start)
        if samples:
            return _rate(samples, clock() - start, cpu_seconds, cpu_start)
        batches = iter(loader)
    raise ValueError("the DataLoader yields no batch in its second epoch; cannot time it")


# A process's CPU time is kept by the 10 ms tick: over a shorter timing (an epoch that ends sooner) it reads 0 or a
# tick, so no CPU figure is kept.
CPU_MIN_WINDOW_S = 0.1


def _rate(samples: int, elapsed: float, cpu_seconds: Callable[[], float] | None, cpu_start: float | None) -> LoaderRate:
    timed = cpu_seconds is not None and cpu_start is not None and elapsed >= CPU_MIN_WINDOW_S
    return LoaderRate(samples / elapsed, (cpu_seconds() - cpu_start) / samples if timed else None)


def step_throughput(
    step: Callable[[], Any],
    samples_per_step: int,
    device,
    seconds: float,
    warmup_steps: int,
    min_steps: int,
    clock: Callable[[], float] = time.perf_counter,
    step_multiple: int = 1,
) -> float:
    """Samples per second of ``step()`` (one training step on a batch already on the device), run back to
    back after ``warmup_steps`` untimed steps, for at least ``seconds`` and ``min_steps`` steps. On a GPU the steps
    queue up as in a training loop; the device is waited for only at the two ends.

    Under gradient accumulation a step is a micro-batch and ``step_multiple`` of them make one optimizer step, taken
    with the last (``step`` starts at the first of a cycle): the warm-up and the timed steps are then each whole
    cycles, so the timing holds as many optimizer steps as training does for its micro-batches (a few micro-batches
    timed alone, without one, would read too fast), and the warm-up takes the first, which sets up the optimizer's
    state."""
    for _ in range(whole_cycles(warmup_steps, step_multiple)):
        step()
    synchronize(device)
    start = clock()
    steps, elapsed = 0, 0.0
    while steps < min_steps or elapsed < seconds or steps % step_multiple:
        step()
        steps += 1
        elapsed = clock() - start
    synchronize(device)
    return steps * samples_per_step / (clock() - start)
