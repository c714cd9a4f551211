"""The largest CUDA allocations of a few training steps, and the line of the user's code that made each: CUDA's
caching allocator records its history with Python stacks (``torch.cuda.memory._record_memory_history``, PyTorch's
documented way to see what holds a GPU's memory) only while these steps run."""

from __future__ import annotations

from collections.abc import Callable

import torch

from autotune.measure.hotspots import is_own_code, shown_path
from autotune.measure.memory import MIB
from autotune.measure.profiling import CudaAllocation

_TOP = 8
_MAX_ENTRIES = 100_000  # allocator events kept: a few steps' worth, bounded


def largest_cuda_allocations(run: Callable[[], None], device: torch.device) -> list[CudaAllocation]:
    """Run ``run()`` (a few training steps) with the allocator's history recorded; its largest allocations, each
    size and place once, largest first."""
    torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python", max_entries=_MAX_ENTRIES)
    try:
        run()
        snapshot = torch.cuda.memory._snapshot(device)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
    index = device.index if device.index is not None else torch.cuda.current_device()
    counted: dict[tuple[int, str], int] = {}
    for event in snapshot["device_traces"][index]:
        if event["action"] == "alloc":
            place = (event["size"], _where(event.get("frames", [])))
            counted[place] = counted.get(place, 0) + 1
    largest = sorted(counted, key=lambda place: place[0], reverse=True)[:_TOP]
    return [CudaAllocation(size / MIB, counted[(size, where)], where) for size, where in largest]


def _where(frames: list[dict]) -> str:
    own = [frame for frame in frames if is_own_code(frame["filename"])]
    frame = (own or frames or [{"filename": "?", "line": 0, "name": "?"}])[0]
    return f"{shown_path(frame['filename'])}:{frame['line']} {frame['name']}"
