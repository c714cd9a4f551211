"""Batch size: samples per optimizer step."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import Knob, SearchContext, parse_int


class BatchSizeKnob(Knob):
    name = "batch_size"
    description = "Samples per step. Larger batches use the hardware better but change training dynamics."

    def parse(self, value: Any) -> int:
        return parse_int(value, minimum=1)

    def default_candidates(self, ctx: SearchContext) -> list[int]:
        """The baseline and the powers of two from half of it to four times it, that fit the dataset."""
        base = ctx.baseline["batch_size"]
        powers = {2**k for k in range(0, 17) if base / 2 <= 2**k <= base * 4}
        return sorted(b for b in powers | {base} if b <= ctx.dataset_len)

    def unavailable_reason(self, value: int, ctx: SearchContext) -> str | None:
        if value > ctx.dataset_len:
            return f"{value} is larger than the dataset ({ctx.dataset_len} samples)"
        return None

    def apply(self, value: int, setup) -> None:
        setup.loader_kwargs["batch_size"] = value
