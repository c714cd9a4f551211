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
    def takes(ndim: int | None, floating: bool = True) -> bool:
        """Whether a batch's tensor of ``ndim`` dimensions (None: not a tensor) goes channels-last: a 4-D (N, C, H, W)
        floating one, an image batch (an integer tensor holds indices or labels, which no convolution reads). Where
        only the dimensions are known (the inspected input: ``SearchContext.input_ndim``), it is taken as floating."""
        return ndim == 4 and floating

    def unavailable_reason(self, value: bool, ctx: SearchContext) -> str | None:
        """A model the inspection saw refuse the conversion (``convert`` raised) fails every run with it."""
        if value and ctx.channels_last_refused:
            return f"the model cannot be converted to channels_last: {ctx.channels_last_refused}"
        return None

    def wasteful_reason(self, value: bool, ctx: SearchContext) -> str | None:
        """Inputs that are not 4-D stay as they come (``takes``): only the model's 4-D weights change layout."""
        if value and not self.takes(ctx.input_ndim):
            return f"needs 4-D input batches (N, C, H, W); this pipeline's input has {ctx.input_ndim} dimensions"
        return None

    @staticmethod
    def convert(model):
        """``model`` in the channels-last layout, as a trial of channels_last=True runs it. What it raises for a model
        that cannot go so (RuntimeError: a 5-D parameter or buffer, a Conv3d's weight; ValueError: a lazy module's
        parameters before its first forward) is why the inspection leaves the knob out
        (``PipelineFacts.channels_last_refused``)."""
        import torch

        return model.to(memory_format=torch.channels_last)

    def apply(self, value: bool, setup) -> None:
        import torch

        if value:
            setup.model = self.convert(setup.model)
            setup.input_memory_format = torch.channels_last
