"""A dataset that is a stream (a ``torch.utils.data.IterableDataset``) rather than map-style: the DataLoader cannot
shuffle it, it may have no length, and each DataLoader worker iterates the whole of it unless it splits itself by
``torch.utils.data.get_worker_info()`` (PyTorch's IterableDataset documentation)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy
import torch
from torch.utils.data import DataLoader, IterableDataset


def is_stream(dataset: Any) -> bool:
    """Whether ``dataset`` is an IterableDataset, read by iterating it, not by index."""
    return isinstance(dataset, IterableDataset)


def shuffles(dataset: Any) -> bool:
    """Whether a DataLoader of ``dataset`` shuffles, as a training loop's does: a map-style dataset's, yes; a stream
    comes in its own order (a DataLoader refuses ``shuffle=True`` for one)."""
    return not is_stream(dataset)


def dataset_length(dataset: Any) -> int | None:
    """``len(dataset)``; None for a stream that has no length (a map-style dataset without one raises TypeError)."""
    try:
        return len(dataset)
    except TypeError:
        if is_stream(dataset):
            return None
        raise


def repeats_in_workers(dataset: Any) -> bool:
    """Whether the stream ``dataset`` gives every DataLoader worker the same samples: its first sample in a second
    worker equals its first in the first (workers hand over their samples in turn). A stream that splits itself
    across workers, or draws each worker's samples from that worker's own random seed, differs there."""
    samples = iter(DataLoader(dataset, batch_size=None, num_workers=2))
    try:
        first = next(samples, None)
        second = next(samples, None)
    finally:
        del samples  # stops the workers
    return first is not None and second is not None and same_sample(first, second)


def same_sample(a: Any, b: Any) -> bool:
    """Whether samples ``a`` and ``b`` hold the same values: tensors of one shape and equal elements, containers of
    equal items, arrays alike, or equal plain values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and torch.equal(a, b)
        )
    if isinstance(a, numpy.ndarray) or isinstance(b, numpy.ndarray):
        return isinstance(a, numpy.ndarray) and isinstance(b, numpy.ndarray) and numpy.array_equal(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_sample(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_sample(x, y) for x, y in zip(a, b, strict=True))
    try:
        return bool(a == b)
    except Exception:  # values with no truth to their comparison (an array's elementwise ==)
        return False
