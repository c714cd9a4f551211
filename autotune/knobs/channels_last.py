"""NHWC memory layout for 4-D image tensors and convolution weights."""

from __future__ import annotations

from autotune.knobs._base import BoolKnob, Role, SearchContext, Target


class ChannelsLastKnob(BoolKnob):
    name = "channels_last"
    role = Role.ACTIVATIONS
    applies_to = (Target.MODEL, Target.BATCH)
    baseline_default = False
    description = "Store 4-D image batches and conv weights channels-last (NHWC); often faster convolutions."

    @staticmethod
    def takes(input_ndim: int | None) -> bool:
        """Whether batches whose input tensor has ``input_ndim`` dimensions (None: not a tensor) can go channels-last:
        4-D ones (N, C, H, W)."""
        return input_ndim == 4

    def default_candidates(self, ctx: SearchContext) -> list[bool]:
        return [False, True] if self.takes(ctx.input_ndim) else [False]

    def unavailable_reason(self, value: bool, ctx: SearchContext) -> str | None:
        if value and not self.takes(ctx.input_ndim):
            return f"needs 4-D input batches (N, C, H, W); this pipeline's input has {ctx.input_ndim} dimensions"
        return None

    def apply(self, value: bool, setup) -> None:
        import torch

        if value:
            setup.model = setup.model.to(memory_format=torch.channels_last)
            setup.input_memory_format = torch.channels_last
