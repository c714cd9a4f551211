"""Batches each DataLoader worker loads ahead of training."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import SearchContext, WorkerKnob, parse_int


class PrefetchFactorKnob(WorkerKnob):
    name = "prefetch_factor"
    baseline_default = 2
    preferred = 2  # PyTorch's default prefetching
    description = (
        "Batches each DataLoader worker keeps loaded ahead (PyTorch's default: 2); more smooths out slow "
        "batches at the cost of memory. Only with num_workers > 0."
    )

    def parse(self, value: Any) -> int | None:
        return None if value is None else parse_int(value, minimum=1)

    def default_candidates(self, ctx: SearchContext) -> list[int]:
        return [2, 4]

    def apply(self, value: int | None, setup) -> None:
        if value is not None:
            setup.loader_kwargs["prefetch_factor"] = value
