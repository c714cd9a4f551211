"""Which implementation of the optimizer's update runs: per-parameter loop, foreach or fused kernels."""

from __future__ import annotations

from autotune.knobs._base import ChoiceKnob, Role, SearchContext, Target

# The optimizer's keyword argument each implementation but default is switched to by (``apply``; the inspection
# reads which the optimizer takes and runs: ``pipeline/inspect.py``).
IMPLEMENTATION_KWARGS = {"for_loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


class OptimizerImplKnob(ChoiceKnob):
    name = "optimizer_impl"
    role = Role.COMPUTE  # the same work whatever the batch size
    applies_to = (Target.OPTIMIZER,)
    baseline_default = "default"
    description = (
        "The optimizer's update implementation: default (PyTorch picks), for_loop (one parameter at a time), "
        "foreach (batched over parameters) or fused (one kernel). Offered where the optimizer accepts it."
    )
    choices = ("default", "for_loop", "foreach", "fused")

    def default_candidates(self, ctx: SearchContext) -> list[str]:
        """default, foreach and fused where the optimizer takes them; the loop is never the faster one, so
        for_loop is not tried."""
        return [impl for impl in self.choices if impl != "for_loop" and self.searchable(impl, ctx)]

    def resolve(self, value: str, ctx: SearchContext) -> str:
        """default is what the optimizer's default step was seen to run here (``ctx.optimizer_default``): PyTorch
        picks per optimizer (Adafactor loops on a GPU, where Adam takes foreach). Where that was not seen (facts or a
        profile stored before it was read), PyTorch's rule for its common optimizers stands in: foreach for CUDA
        parameters, the loop otherwise."""
        if value != "default":
            return value
        if ctx.optimizer_default is not None:
            return ctx.optimizer_default
        return "foreach" if ctx.device == "cuda" else "for_loop"

    def unavailable_reason(self, value: str, ctx: SearchContext) -> str | None:
        """Every value but default needs the pipeline's optimizer to run it here (``ctx.optimizer_options``: it takes
        the keyword, and where its default steps on the inspection's test parameters, it steps with it too)."""
        if value != "default" and value not in ctx.optimizer_options:
            return (
                f"the pipeline's optimizer does not take {_in_words(value)} here, its build or step refuses it, or "
                "its config sets foreach or fused itself (then that is its implementation: leave optimizer_impl unset)"
            )
        return None

    def apply(self, value: str, setup) -> None:
        setup.optimizer_kwargs.update(IMPLEMENTATION_KWARGS.get(value, {}))


def _in_words(value: str) -> str:
    """The keyword argument implementation ``value`` is switched to by, as written: "fused=True"."""
    return ", ".join(f"{name}={setting}" for name, setting in IMPLEMENTATION_KWARGS[value].items())
