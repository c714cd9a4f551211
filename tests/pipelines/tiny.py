"""Small, fast pipelines for tests: one that trains, and ones that fail for chosen knob values."""

from __future__ import annotations

import os

import torch
from torch import nn
from torch.utils.data import Dataset, get_worker_info


class TinyImages(Dataset):
    """Deterministic 3x8x8 images with 4 classes; ``length`` may be 0 to test the empty-dataset check."""

    def __init__(self, length: int = 256) -> None:
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        generator = torch.Generator().manual_seed(index)
        return torch.rand(3, 8, 8, generator=generator), torch.tensor(index % 4)


class TinyCNN(nn.Module):
    def __init__(self, num_classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(4, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(x))


class WorkerHatingImages(TinyImages):
    """Raises inside DataLoader workers: every num_workers > 0 trial fails with an exception."""

    def __getitem__(self, index: int):
        if get_worker_info() is not None:
            raise RuntimeError("this dataset refuses to load in a worker")
        return super().__getitem__(index)


class AbortOnChannelsLast(TinyCNN):
    """Kills its own process (SIGABRT) when given channels-last input: a crash, not an exception."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous():
            os.abort()
        return super().forward(x)


class HangingImages(TinyImages):
    """Hangs forever inside DataLoader workers: the trial must be killed at its timeout, workers too."""

    def __getitem__(self, index: int):
        if get_worker_info() is not None:
            import time

            time.sleep(3600)
        return super().__getitem__(index)


class PidImages(TinyImages):
    """Images labelled with the process id that loaded them: which DataLoader worker served each sample."""

    def __getitem__(self, index: int):
        return super().__getitem__(index)[0], torch.tensor(os.getpid())
