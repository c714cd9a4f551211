"""Page-locked host memory for faster, asynchronous copies to the GPU."""

from __future__ import annotations

from autotune.knobs._base import BoolKnob, Role, SearchContext, Target


class PinMemoryKnob(BoolKnob):
    name = "pin_memory"
    role = Role.UNTIMED
    applies_to = (Target.LOADER, Target.BATCH)
    baseline_default = False
    description = (
        "DataLoader puts batches in pinned memory so host-to-GPU copies are faster and asynchronous (CUDA only)."
    )

    def resolve(self, value: bool, ctx: SearchContext) -> bool:
        """Off on a machine without a GPU, whatever it says: a baseline that sets it there (many scripts do, whatever
        the device) runs as one that does not, so turning it off is no change to recommend. Where a GPU is visible
        the DataLoader pins, whichever device the model runs on."""
        return value and (ctx.device == "cuda" or ctx.gpu_visible)

    def wasteful_reason(self, value: bool, ctx: SearchContext) -> str | None:
        """Off a GPU it runs: the DataLoader pins nothing without one, and pins for nothing beside one the model does
        not run on."""
        if value and ctx.device != "cuda":
            return f"pinned memory only speeds up copies to a GPU; this run is on {ctx.device}"
        return None

    def apply(self, value: bool, setup) -> None:
        setup.loader_kwargs["pin_memory"] = value
        setup.non_blocking_copy = value
