"""Time a training loop: warm-up steps, then a timed window bounded by steps and seconds."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WindowPlan:
    """How long to train before and while timing.

    The window ends once it has ``min_steps`` steps and ``min_time_s`` seconds, or at
    ``max_time_s`` seconds whatever the step count.
    """

    warmup_steps: int = 5
    min_steps: int = 30
    min_time_s: float = 4.0
    max_time_s: float = 30.0


@dataclass(frozen=True)
class Timing:
    """What the timed window saw. Times are seconds; throughput is samples per second."""

    steps: int
    samples: int
    window_s: float
    throughput: float
    steps_per_s: float
    mean_step_s: float
    median_step_s: float
    data_wait_s: float
    compute_s: float
    data_stall_fraction: float
    warmup_steps: int
    first_step_s: float
    compile_s: float


def time_training(
    batches: Iterator[Any],
    train_step: Callable[[Any], Any],
    count_samples: Callable[[Any], int],
    plan: WindowPlan,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    compiling: bool = False,
) -> Timing:
    """Run warm-up then the timed window over ``batches``.

    Each window step is split into data wait (blocked on the next batch) and compute (the
    step itself, ended by ``sync`` so asynchronous devices are counted). With ``compiling``,
    the first step's excess over the median step is reported as compile time.
    """
    first_step_s = 0.0
    for index in range(plan.warmup_steps):
        start = clock()
        train_step(next(batches))
        sync()
        if index == 0:
            first_step_s = clock() - start

    waits: list[float] = []
    computes: list[float] = []
    samples = 0
    window_start = clock()
    while True:
        before_data = clock()
        batch = next(batches)
        before_step = clock()
        train_step(batch)
        sync()
        end = clock()
        waits.append(before_step - before_data)
        computes.append(end - before_step)
        samples += count_samples(batch)
        elapsed = end - window_start
        if elapsed >= plan.max_time_s or (len(waits) >= plan.min_steps and elapsed >= plan.min_time_s):
            break
    return _summarise(waits, computes, samples, elapsed, plan.warmup_steps, first_step_s, compiling)


def _summarise(waits, computes, samples, window_s, warmup_steps, first_step_s, compiling) -> Timing:
    steps = len(waits)
    step_times = [w + c for w, c in zip(waits, computes, strict=True)]
    data_wait_s, compute_s = sum(waits), sum(computes)
    median_step_s = statistics.median(step_times)
    return Timing(
        steps=steps,
        samples=samples,
        window_s=window_s,
        throughput=samples / window_s,
        steps_per_s=steps / window_s,
        mean_step_s=window_s / steps,
        median_step_s=median_step_s,
        data_wait_s=data_wait_s,
        compute_s=compute_s,
        data_stall_fraction=data_wait_s / (data_wait_s + compute_s),
        warmup_steps=warmup_steps,
        first_step_s=first_step_s,
        compile_s=max(0.0, first_step_s - median_step_s) if compiling else 0.0,
    )
