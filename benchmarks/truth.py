"""Truth: does the harness report what really happened?

    .venv/bin/python -m benchmarks.truth

1. A dataset that sleeps 5 ms per sample, loaded in the training process: data stall must be > 0.5.
2. A small in-memory dataset: data stall must be < 0.2.
3. Throughput against an independent count: the dataset itself counts the samples it serves and a
   separate wall clock (time.time) brackets the harness's timed window; the two must agree within 3 %.
"""

from __future__ import annotations

import time

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

import autotune
from autotune.measure.recorder import WARMUP, WINDOW, WindowPlan
from benchmarks.common import train_step
from examples.mymodel import SmallCNN


class SleepyImages(Dataset):
    """Random images that take ``sleep_s`` each to 'load', and count how many were served."""

    def __init__(self, length: int = 4096, sleep_s: float = 0.005) -> None:
        self.length, self.sleep_s, self.served = length, sleep_s, 0

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        time.sleep(self.sleep_s)
        self.served += 1
        return torch.rand(3, 64, 64), index % 10


class CountingTensors(TensorDataset):
    def __init__(self, *tensors) -> None:
        super().__init__(*tensors)
        self.served = 0

    def __getitem__(self, index: int):
        self.served += 1
        return super().__getitem__(index)


def epochs(loader):
    while True:
        yield from loader


def measure(dataset, batch_size: int = 32, seconds: float = 6.0):
    """Profile SmallCNN on ``dataset``; return the harness's Measurement and the independent throughput."""
    torch.manual_seed(0)
    model = SmallCNN()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    plan = WindowPlan(min_steps=20, min_time_s=seconds, max_time_s=seconds * 3)
    with autotune.profile("truth", plan=plan) as prof:
        for inputs, targets in prof.wrap(epochs(loader)):
            train_step(model, loss_fn, optimizer, inputs, targets)
            before = prof.recorder.phase
            prof.step()
            if before == WARMUP and prof.recorder.phase == WINDOW:
                start_wall, start_served = time.time(), dataset.served
            if prof.done:
                break
    independent = (dataset.served - start_served) / (time.time() - start_wall)
    return prof.result, independent


def main() -> None:
    cases = {
        "sleeps 5 ms/sample": SleepyImages(),
        "in memory": CountingTensors(torch.rand(2048, 3, 64, 64), torch.randint(0, 10, (2048,))),
    }
    for name, dataset in cases.items():
        result, independent = measure(dataset)
        timing = result.timing
        agreement = timing.throughput / independent
        print(
            f"{name}: data stall {timing.data_stall_fraction:.3f}; harness {timing.throughput:.1f} samples/s, "
            f"independent count {independent:.1f} samples/s, ratio {agreement:.4f}; "
            f"{timing.steps} steps in {timing.window_s:.2f} s after {timing.warmup_steps} warm-up steps"
        )


if __name__ == "__main__":
    main()
