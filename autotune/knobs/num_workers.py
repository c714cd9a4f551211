"""DataLoader worker processes."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import Knob, SearchContext, parse_int


class NumWorkersKnob(Knob):
    name = "num_workers"
    description = (
        "DataLoader worker processes preparing batches in parallel with training (0 = in the training process)."
    )

    def parse(self, value: Any) -> int:
        return parse_int(value, minimum=0)

    def default_candidates(self, ctx: SearchContext) -> list[int]:
        """Zero up to one worker per usable CPU core."""
        return list(range(0, ctx.cpu_count + 1))

    def apply(self, value: int, setup) -> None:
        setup.loader_kwargs["num_workers"] = value
