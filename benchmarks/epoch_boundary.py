"""Epoch boundaries: what does starting a new epoch cost, with and without persistent DataLoader workers?

    .venv/bin/python -m benchmarks.epoch_boundary [--epochs 3] [--batch-size 128] [--workers 2]

Trains the `images` example (JPEG decode, examples/mymodel.py's CNN with channels_last and bf16 autocast,
one compute thread) for a few epochs and times every step. For each epoch boundary it prints the step times
around it and the boundary's excess: the first 8 steps of the new epoch minus 8 median steps. Run once with
``persistent_workers`` false and once true. Answers whether a timed window that happens to contain a
boundary misreads a configuration (docs/benchmarks.md, Known limits).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch.utils.data import DataLoader

from benchmarks.common import announce_machine
from examples.images import JpegImages
from examples.mymodel import SmallCNN

_AFTER = 8  # steps after a boundary counted in its excess


def step_times(persistent: bool, epochs: int, batch_size: int, workers: int) -> tuple[list[float], list[int]]:
    """Every step's duration, and the index of each epoch's first step."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = SmallCNN(num_classes=10, stem=True).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = DataLoader(
        JpegImages(length=8192, num_classes=10),
        batch_size=batch_size,
        shuffle=True,
        drop_last=True,
        num_workers=workers,
        persistent_workers=persistent,
    )
    times: list[float] = []
    starts: list[int] = []
    last = time.perf_counter()
    for _ in range(epochs):
        starts.append(len(times))
        for inputs, targets in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(model(inputs.to(memory_format=torch.channels_last)), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            now = time.perf_counter()
            times.append(now - last)
            last = now
    return times, starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    announce_machine()
    for persistent in (False, True):
        times, starts = step_times(persistent, args.epochs, args.batch_size, args.workers)
        median = statistics.median(times[10:])
        print(f"persistent_workers={persistent}: {starts[1]} steps per epoch, median step {median:.3f} s")
        for start in starts[1:]:
            around = ", ".join(f"{t:.3f}" for t in times[start - 2 : start + _AFTER])
            excess = sum(t - median for t in times[start : start + _AFTER])
            print(f"  boundary at step {start}: steps {around}; excess {excess:.2f} s")
        epoch_s = sum(times[starts[1] : starts[2]]) if len(starts) > 2 else float("nan")
        print(f"  second epoch {epoch_s:.2f} s: {starts[1] * args.batch_size / epoch_s:.1f} samples/s")


if __name__ == "__main__":
    main()
