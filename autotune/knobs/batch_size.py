"""Batch size: samples per optimizer step, or per micro-batch under search.batch_policy=fixed_effective."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import REQUIRED, Knob, Role, SearchContext, Target, parse_int


class BatchSizeKnob(Knob):
    name = "batch_size"
    role = Role.LOADER
    applies_to = (Target.LOADER,)
    baseline_default = REQUIRED
    description = (
        "Samples per DataLoader batch. Larger batches use the hardware better but change training dynamics; "
        "with search.batch_policy=fixed_effective it is a micro-batch and gradients accumulate up to the "
        "baseline's batch size: the same effective batch and learning rate, but layers that compute statistics "
        "over the batch (BatchNorm) see micro-batches."
    )

    def parse(self, value: Any) -> int:
        return parse_int(value, minimum=1)

    def default_candidates(self, ctx: SearchContext) -> list[int]:
        """Free: the baseline and the powers of two from half of it to four times it, that fit the dataset.
        Fixed effective: the baseline divided by 1, 2, 4 and 8, where that divides evenly. A stream with no length
        bounds none."""
        base = ctx.baseline["batch_size"]
        if ctx.batch_policy == "fixed_effective":
            return sorted({base // d for d in (1, 2, 4, 8) if base % d == 0})
        powers = {2**k for k in range(0, 17) if base / 2 <= 2**k <= base * 4}
        return sorted(b for b in powers | {base} if ctx.dataset_len is None or b <= ctx.dataset_len)

    def unavailable_reason(self, value: int, ctx: SearchContext) -> str | None:
        base = ctx.baseline["batch_size"]
        if ctx.batch_policy == "fixed_effective" and base % value != 0:
            return f"with search.batch_policy=fixed_effective a micro-batch must divide the baseline's {base}"
        if ctx.dataset_len is not None and value > ctx.dataset_len:
            return f"it is larger than the dataset ({ctx.dataset_len} samples), so no full batch exists"
        return None

    def apply(self, value: int, setup) -> None:
        setup.loader_kwargs["batch_size"] = value
