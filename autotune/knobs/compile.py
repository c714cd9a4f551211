"""torch.compile: graph capture and code generation for the model."""

from __future__ import annotations

import torch

from autotune.knobs._base import ChoiceKnob, Role, SearchContext, Target


class CompileKnob(ChoiceKnob):
    name = "compile"
    role = Role.UNTIMED
    applies_to = (Target.MODEL,)
    baseline_default = "off"
    costly = True  # one compile costs more than the whole probe
    changes_numerics = True
    description = "torch.compile the model with this mode. Costs compile time up front; may or may not pay back."
    choices = ("off", "default", "reduce-overhead", "max-autotune")

    def default_candidates(self, ctx: SearchContext) -> list[str]:
        # reduce-overhead means CUDA graphs, which do nothing on a CPU; max-autotune's
        # benchmarking compile takes minutes, so it is tried only when asked for.
        return ["off", "default", "reduce-overhead"] if ctx.device == "cuda" else ["off", "default"]

    def apply(self, value: str, setup) -> None:
        if value != "off":
            setup.model = torch.compile(setup.model, mode=value)
