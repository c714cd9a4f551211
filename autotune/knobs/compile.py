"""torch.compile: graph capture and code generation for the model."""

from __future__ import annotations

from typing import Any

from autotune.knobs._base import ChoiceKnob, Role, SearchContext, Target

# The modes that turn on triton.cudagraphs (``torch._inductor.list_mode_options``).
_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def replays_cuda_graphs(mode: str, device: str | None) -> bool:
    """Whether torch.compile's ``mode`` replays the step as CUDA graphs on ``device`` (a kind: "cpu", "cuda"; None:
    not known, taken as a GPU): reduce-overhead and max-autotune turn them on, and only a GPU runs them."""
    return mode in _CUDA_GRAPH_MODES and device in (None, "cuda")


class CompileKnob(ChoiceKnob):
    name = "compile"
    role = Role.UNTIMED
    applies_to = (Target.MODEL,)
    baseline_default = "off"
    costly = True  # one compile costs more than the whole probe
    changes_numerics = True
    redraws_random = True  # inductor draws its own random numbers (dropout masks), not eager's of the same seed
    description = "torch.compile the model with this mode. Costs compile time up front; may or may not pay back."
    choices = ("off", "default", "reduce-overhead", "max-autotune")

    def default_candidates(self, ctx: SearchContext) -> list[str]:
        """off, default and, where it is more than default (on a GPU), reduce-overhead; max-autotune's
        benchmarking compile takes minutes, so it is tried only when asked for."""
        return list(dict.fromkeys(self.resolve(mode, ctx) for mode in ("off", "default", "reduce-overhead")))

    def resolve(self, value: str, ctx: SearchContext) -> str:
        """reduce-overhead is default with CUDA graphs (``replays_cuda_graphs``): on a CPU, which runs none, it is
        default. (max-autotune is not: its autotuning runs on a CPU too.)"""
        if value == "reduce-overhead" and not replays_cuda_graphs(value, ctx.device):
            return "default"
        return value

    def conflict(
        self, value: str, knobs: dict[str, Any], effective_batch_size: int | None = None, device: str | None = None
    ) -> str | None:
        """Where reduce-overhead and max-autotune replay CUDA graphs (``replays_cuda_graphs``: on a GPU), each
        replay writes the step's outputs, gradients among them, into the same memory: gradients kept from one step
        to the next (zeroed in place, or accumulated over micro-batches) are overwritten by the next replay, or
        raise "accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run"
        (pytorch/pytorch#169545). On a CPU no graph is replayed, and they run beside either."""
        if not replays_cuda_graphs(value, device):
            return None
        graphs = f"CUDA graphs (compile={value}) overwrite the gradients of one step with the next step's"
        if knobs.get("set_to_none") is False:
            return f"{graphs}, and set_to_none=false keeps them from one step to the next"
        batch_size = knobs.get("batch_size")
        if effective_batch_size is not None and batch_size is not None and batch_size < effective_batch_size:
            return (
                f"{graphs}, and batch_size={batch_size} accumulates them over micro-batches up to "
                f"{effective_batch_size} (search.batch_policy=fixed_effective)"
            )
        return None

    def apply(self, value: str, setup) -> None:
        import torch

        if value != "off":
            setup.model = torch.compile(setup.model, mode=value)
