"""Shared helpers for the benchmarks: the example pipeline built in-process, and summaries."""

from __future__ import annotations

import statistics

import torch

from examples.mymodel import SmallCNN, SyntheticImages


def example_pipeline(batch_size: int = 32, num_workers: int = 0, length: int = 4096):
    """SmallCNN + SyntheticImages as mymodel.yaml configures them: (model, loss, optimizer, loader)."""
    torch.manual_seed(0)
    model = SmallCNN(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        SyntheticImages(length=length), batch_size=batch_size, shuffle=True, drop_last=True, num_workers=num_workers
    )
    return model, torch.nn.CrossEntropyLoss(), optimizer, loader


def train_step(model, loss_fn, optimizer, inputs, targets) -> None:
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def describe(values: list[float]) -> str:
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 else 0.0
    return f"median {statistics.median(values):.1f}, mean {mean:.1f}, CV {cv:.1%}, n={len(values)}"
