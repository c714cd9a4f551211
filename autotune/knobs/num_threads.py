"""Intra-op threads of the training process (torch.set_num_threads)."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import Knob, Role, SearchContext, Target, parse_int

# More threads a core than this is refused in a search: threads beyond the cores only take turns, and a count this
# far beyond is a slip, not a list shared with a machine of more cores (docs/scaling.md).
THREADS_A_CORE = 4


class NumThreadsKnob(Knob):
    name = "num_threads"
    role = Role.ACTIVATIONS  # more threads share larger tensors better
    applies_to = (Target.PROCESS,)
    baseline_default = None  # torch's default
    description = (
        "torch intra-op threads in the training process; null keeps torch's default. On a CPU, DataLoader "
        "workers and compute threads compete for the same cores, so fewer threads can be faster."
    )

    def parse(self, value: Any) -> int | None:
        return None if value is None else parse_int(value, minimum=1)

    def default_candidates(self, ctx: SearchContext) -> list[int]:
        """Powers of two up to the usable cores, the core count itself, and the baseline's count where it sets one
        worth a search (``wasteful_reason``): the probe times the model step around the baseline's own settings
        where the space holds them, so its timings bound the baseline's."""
        counts = {2**k for k in range(ctx.cpu_count.bit_length())} | {ctx.cpu_count}
        baseline = ctx.baseline.get(self.name)
        if isinstance(baseline, int) and baseline >= 1 and self.wasteful_reason(baseline, ctx) is None:
            counts.add(baseline)
        return sorted(counts)

    def wasteful_reason(self, value: int | None, ctx: SearchContext) -> str | None:
        if value is not None and value > THREADS_A_CORE * ctx.cpu_count:
            return (
                f"{value} threads on the {ctx.cpu_count} cores trials run on is more than {THREADS_A_CORE} a core: "
                "threads beyond the cores only take turns on them"
            )
        return None

    def resolve(self, value: int | None, ctx: SearchContext) -> int | None:
        return ctx.torch_threads if value is None else value

    def apply(self, value: int | None, setup) -> None:
        import torch

        if value is not None:
            torch.set_num_threads(value)
