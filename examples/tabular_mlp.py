"""Example pipeline ``tabular_mlp``: a small MLP on an in-memory tabular dataset (overhead-bound).

Bottleneck: **per-step overhead**. The features and labels are tensors computed once in ``__init__``
and ``__getitem__`` only indexes them, and the model is three small matrix multiplies, so the
arithmetic of a step takes a fraction of a millisecond. What a step costs is mostly fixed Python and
framework work: the DataLoader fetching and collating each sample one by one, autograd bookkeeping,
the optimizer's per-parameter loop and operator dispatch. Knobs that amortise it (a larger batch) or
cut it pay off; knobs that add per-step machinery (workers passing batches between processes,
autocast casts) tend to cost more than they save.

The data is synthetic and deterministic: Gaussian features from a seeded generator, labelled by a
fixed random linear "teacher", so the task is learnable.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import Dataset


class SyntheticTable(Dataset):
    """``length`` rows of ``num_features`` float32 features and an int64 class label, all in memory."""

    def __init__(self, length: int = 16384, num_features: int = 64, num_classes: int = 10, seed: int = 0):
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(length, num_features, generator=generator)
        teacher = torch.randn(num_features, num_classes, generator=generator)
        noise = 0.5 * torch.randn(length, num_classes, generator=generator)
        self.labels = (self.features @ teacher + noise).argmax(dim=1)

    def __len__(self) -> int:
        return self.features.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.features[index], self.labels[index]


class MLP(nn.Module):
    """``in_features`` -> ``hidden`` -> ``hidden`` -> ``num_classes`` with ReLU between the layers."""

    def __init__(self, in_features: int = 64, hidden: int = 256, num_classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)
