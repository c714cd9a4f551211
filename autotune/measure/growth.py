"""Memory step by step over a profiling run's sample of steps: the evidence a leak leaves."""

from __future__ import annotations

import os

import torch

from autotune.measure.memory import MIB, ProcessTree
from autotune.measure.profiling import MemoryTrend


class MemoryTrendRecorder:
    """Reads memory after each step (``read``) of this process's tree and, on CUDA, of ``device``'s allocator."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._tree = ProcessTree(os.getpid())
        self._tree_mb: list[float] = []
        self._cuda_mb: list[float] = []

    def read(self) -> None:
        self._tree_mb.append(self._tree.read_full().total / MIB)
        if self.device.type == "cuda":
            self._cuda_mb.append(torch.cuda.memory_allocated(self.device) / MIB)

    def trend(self) -> MemoryTrend:
        return MemoryTrend(self._tree_mb, self._cuda_mb if self.device.type == "cuda" else None, self._tree.metric)
