"""Memory step by step over a profiling run's sample of steps: the evidence a leak leaves."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import Any

import torch

from autotune.measure.memory import MIB, ProcessTree


@dataclass(frozen=True)
class MemoryTrend:
    """After each step: the memory of the training process and its DataLoader workers (``tree_mb``, by ``metric``:
    "pss" where the OS reports it, else "rss"), and on a GPU what CUDA's allocator has allocated
    (``cuda_allocated_mb``, else None).

    PSS, not RSS: a forked worker shares its parent's pages, freed ones included, and a leak that fills those counts
    in the worker's RSS from the start, so RSS would not grow; PSS moves each page to the worker that writes it. Its
    read takes milliseconds a process, which is why it runs between steps, outside every stage's time.
    """

    tree_mb: list[float]
    cuda_allocated_mb: list[float] | None = None
    metric: str = "pss"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryTrend:
        return cls(**data)


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
