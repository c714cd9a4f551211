"""Facts about a pipeline that decide which knobs apply, read once before any trial runs."""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch
from torch.utils.data import default_collate

from autotune.errors import ConfigError
from autotune.pipeline.build import build_component
from autotune.pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class PipelineFacts:
    """``input_ndim`` counts the batch dimension; None when the input is not a tensor.
    ``optimizer_options`` are the implementation switches ("foreach", "fused") the optimizer takes."""

    dataset_len: int
    input_ndim: int | None
    optimizer_options: frozenset[str] = frozenset()


def inspect_pipeline(spec: PipelineSpec, device: str = "cpu") -> PipelineFacts:
    """Build the dataset, check it is usable, read the shape of one collated input, and find which
    optimizer implementations can run on ``device``."""
    dataset = build_component(spec, "dataset")
    try:
        length = len(dataset)
    except TypeError as exc:
        raise ConfigError(
            "pipeline.dataset", f"len() of {type(dataset).__name__} failed ({exc}): autotune needs a map-style Dataset"
        ) from None
    except Exception as exc:
        raise ConfigError("pipeline.dataset", f"len() of {type(dataset).__name__} failed: {exc}") from None
    if length == 0:
        raise ConfigError("pipeline.dataset", f"{type(dataset).__name__} is empty (length 0)")
    collate = build_component(spec, "collate_fn") or default_collate
    try:
        batch = collate([dataset[0]])
    except Exception as exc:
        raise ConfigError(
            "pipeline.dataset", f"reading and collating sample 0 failed: {type(exc).__name__}: {exc}"
        ) from exc
    options = optimizer_options(build_component(spec, "optimizer"), device)
    return PipelineFacts(dataset_len=length, input_ndim=_input_ndim(batch), optimizer_options=options)


def optimizer_options(factory, device: str) -> frozenset[str]:
    """The switches among foreach/fused that ``factory``'s optimizer accepts. On a CPU, fused is kept only
    if one step of it runs (on a GPU, every optimizer that takes ``fused`` supports it)."""
    try:
        parameters = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return frozenset()
    options = {name for name in ("foreach", "fused") if name in parameters}
    if "fused" in options and device != "cuda" and not _fused_runs_on_cpu(factory):
        options.discard("fused")
    return frozenset(options)


def _fused_runs_on_cpu(factory) -> bool:
    weight = torch.nn.Parameter(torch.zeros(2))
    weight.grad = torch.ones(2)
    try:
        factory([weight], fused=True).step()
    except Exception:  # any refusal means: not here
        return False
    return True


def _input_ndim(batch) -> int | None:
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return first.dim() if isinstance(first, torch.Tensor) else None
