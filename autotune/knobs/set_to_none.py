"""How gradients are cleared between steps."""

from __future__ import annotations

from autotune.knobs._base import BoolKnob, Role, SearchContext, Target


class SetToNoneKnob(BoolKnob):
    name = "set_to_none"
    role = Role.COMPUTE
    applies_to = (Target.GRADIENTS,)
    baseline_default = True
    description = (
        "optimizer.zero_grad(set_to_none=...): true (PyTorch's default) frees gradients between steps, "
        "false zeroes them in place and keeps their memory."
    )

    def default_candidates(self, ctx: SearchContext) -> list[bool]:
        return [True, False]

    def apply(self, value: bool, setup) -> None:
        setup.zero_grad_to_none = value
