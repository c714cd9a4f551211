"""A workload for the harness benchmarks: a large image dataset held in memory, cropped and resized per sample.

Like an image folder cached in RAM: ``megabytes`` of uint8 pictures (so the training process is large, as real
ones are, and forked DataLoader workers share those pages), each sample a random crop resized with PIL to
``image_size`` and normalised. With examples/mymodel.py's SmallCNN at batch 32 a step takes ~110 ms on the 2-core
machine of docs/benchmarks.md, and the training process holds ~700 MiB.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset


class CachedImages(Dataset):
    """``length`` samples drawn from ``megabytes`` of in-memory uint8 RGB pictures of ``source_size`` pixels."""

    def __init__(
        self, length: int = 4096, megabytes: int = 200, source_size: int = 192, image_size: int = 96, seed: int = 0
    ) -> None:
        self.length, self.image_size, self.seed = length, image_size, seed
        count = megabytes * 2**20 // (3 * source_size * source_size)
        rng = np.random.default_rng(seed)
        self.pictures = rng.integers(0, 256, (count, source_size, source_size, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, count)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(self.seed + index)
        which = index % len(self.pictures)
        size = self.pictures.shape[1]
        crop = int(rng.integers(size // 2, size + 1))
        left, top = (int(v) for v in rng.integers(0, size - crop + 1, 2))
        picture = Image.fromarray(self.pictures[which, top : top + crop, left : left + crop])
        picture = picture.resize((self.image_size, self.image_size), Image.Resampling.BILINEAR)
        pixels = np.asarray(picture, dtype=np.float32).transpose(2, 0, 1) / 255.0
        return torch.from_numpy((pixels - 0.5) / 0.25), torch.tensor(int(self.labels[which]))


class WaitingImages(Dataset):
    """Small synthetic images, each read after a wait of ``wait_ms`` (a slow disk, a network store): the loading's time
    is spent waiting, not on a core, so more DataLoader workers than cores overlap the waits."""

    def __init__(self, length: int = 4096, image_size: int = 32, wait_ms: float = 4.0, seed: int = 0) -> None:
        self.length, self.image_size, self.wait_s, self.seed = length, image_size, wait_ms / 1000, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(self.wait_s)
        generator = torch.Generator().manual_seed(self.seed + index)
        pixels = torch.rand(3, self.image_size, self.image_size, generator=generator)
        return pixels, torch.tensor(index % 10)
