"""Automatic mixed precision: run eligible ops in a 16-bit float type."""

from __future__ import annotations

from autotune.knobs._base import ChoiceKnob, Role, SearchContext, Target


class AmpKnob(ChoiceKnob):
    name = "amp"
    role = Role.ACTIVATIONS  # larger tensors amortise the casts
    applies_to = (Target.PRECISION,)
    baseline_default = "off"
    changes_numerics = True
    description = "Autocast to bfloat16 or float16. Fast on hardware with 16-bit units, slower where they are emulated."
    choices = ("off", "bf16", "fp16")

    def wasteful_reason(self, value: str, ctx: SearchContext) -> str | None:
        """Every value runs anywhere (autocast and its loss scaler take a CPU too); fp16 off a GPU and bf16 on a GPU
        that emulates it are never the faster for it."""
        if value == "fp16" and ctx.device != "cuda":
            return (
                f"fp16 autocast with loss scaling is for GPUs; on {ctx.device} bf16 is the 16-bit type CPUs have "
                "units for"
            )
        if value == "bf16" and ctx.device == "cuda" and not ctx.bf16_supported:
            return "this GPU computes bfloat16 only emulated (compute capability below 8.0), slower than fp32"
        return None

    def apply(self, value: str, setup) -> None:
        if value == "off":
            return
        import torch

        setup.autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[value]
        if value == "fp16":
            setup.grad_scaler = torch.amp.GradScaler(setup.device.type)
