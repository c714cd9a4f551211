"""cuDNN autotuning of convolution algorithms."""

from __future__ import annotations

from autotune.knobs._base import BoolKnob, Role, SearchContext, Target


class CudnnBenchmarkKnob(BoolKnob):
    name = "cudnn_benchmark"
    role = Role.UNTIMED
    applies_to = (Target.PROCESS,)
    baseline_default = False
    description = (
        "torch.backends.cudnn.benchmark: cuDNN times several convolution algorithms for each input shape and "
        "keeps the fastest (CUDA only; pays off when shapes repeat)."
    )

    def resolve(self, value: bool, ctx: SearchContext) -> bool:
        """Off anywhere but on a GPU, whatever it says: a baseline that sets it for a model on a CPU (many scripts do,
        whatever the device) runs as one that does not (``apply`` sets it on a GPU only), so turning it off is no
        change to recommend."""
        return value and ctx.device == "cuda"

    def wasteful_reason(self, value: bool, ctx: SearchContext) -> str | None:
        """On a CPU it runs and changes nothing (``apply`` sets it on a GPU only)."""
        if value and ctx.device != "cuda":
            return f"cuDNN exists only on a GPU; this run is on {ctx.device}"
        return None

    def apply(self, value: bool, setup) -> None:
        import torch

        if setup.device.type == "cuda":
            torch.backends.cudnn.benchmark = value
