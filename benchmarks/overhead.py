"""Overhead of the profiling harness: its throughput vs a plain, uninstrumented loop, interleaved.

    .venv/bin/python -m benchmarks.overhead [--rounds 8] [--steps 60]

Each round runs the same loop twice in this process, in alternating order: once plain (timed by
hand after the same number of warm-up steps the harness used) and once under autotune.profile().
The ratio of medians is harness / plain; 1.0 means no overhead.
"""

from __future__ import annotations

import argparse
import statistics
import time

import autotune
from autotune.measure.recorder import WindowPlan
from benchmarks.common import describe, example_pipeline, train_step


def plain(steps: int, warmup: int, batch_size: int) -> float:
    model, loss_fn, optimizer, loader = example_pipeline(batch_size)
    batches = iter(loader)
    for _ in range(warmup):
        train_step(model, loss_fn, optimizer, *next(batches))
    start, samples = time.perf_counter(), 0
    for _ in range(steps):
        inputs, targets = next(batches)
        train_step(model, loss_fn, optimizer, inputs, targets)
        samples += len(inputs)
    return samples / (time.perf_counter() - start)


def profiled(steps: int, batch_size: int) -> tuple[float, int]:
    model, loss_fn, optimizer, loader = example_pipeline(batch_size)
    with autotune.profile(plan=WindowPlan(min_steps=steps, min_time_s=0.0, max_time_s=1e9)) as prof:
        for inputs, targets in prof.wrap(loader):
            train_step(model, loss_fn, optimizer, inputs, targets)
            prof.step()
            if prof.done:
                break
    return prof.result.timing.throughput, prof.result.timing.warmup_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60, help="timed steps per run")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    harness, bare = [], []
    for round_index in range(args.rounds):
        order = ("profiled", "plain") if round_index % 2 == 0 else ("plain", "profiled")
        for kind in order:
            if kind == "profiled":
                value, warmup = profiled(args.steps, args.batch_size)
                harness.append(value)
            else:
                bare.append(plain(args.steps, warmup if harness else 8, args.batch_size))
        print(f"round {round_index + 1}: harness {harness[-1]:.1f}, plain {bare[-1]:.1f} samples/s", flush=True)
    print(f"harness: {describe(harness)}")
    print(f"plain:   {describe(bare)}")
    print(f"ratio of medians (harness / plain): {statistics.median(harness) / statistics.median(bare):.3f}")


if __name__ == "__main__":
    main()
