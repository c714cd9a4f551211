"""Facts about a pipeline that decide which knobs apply, read once before any trial runs."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.data import default_collate

from autotune.errors import ConfigError
from autotune.pipeline.build import build_component
from autotune.pipeline.spec import PipelineSpec


@dataclass(frozen=True)
class PipelineFacts:
    """``input_ndim`` counts the batch dimension; None when the input is not a tensor."""

    dataset_len: int
    input_ndim: int | None


def inspect_pipeline(spec: PipelineSpec) -> PipelineFacts:
    """Build the dataset, check it is usable, and read the shape of one collated input."""
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
    return PipelineFacts(dataset_len=length, input_ndim=_input_ndim(batch))


def _input_ndim(batch) -> int | None:
    first = batch[0] if isinstance(batch, (tuple, list)) else batch
    return first.dim() if isinstance(first, torch.Tensor) else None
