"""A dataset that is a stream (a ``torch.utils.data.IterableDataset``) rather than map-style: the DataLoader cannot
shuffle it, it may have no length, and each DataLoader worker iterates the whole of it unless it splits itself by
``torch.utils.data.get_worker_info()`` (PyTorch's IterableDataset documentation)."""

from __future__ import annotations

import dataclasses
import random
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
    """``len(dataset)``; None for a stream that has none (a map-style dataset's len() raises as it does)."""
    try:
        return len(dataset)
    except Exception:  # a stream needs no length, whatever len() raises for it
        if is_stream(dataset):
            return None
        raise


def epoch_steps(loader: DataLoader) -> int | None:
    """The steps of an epoch of ``loader``; None where its dataset has no length, or is a stream, whose workers each
    drop their own last part-batch, so that len() may count more steps than an epoch has."""
    if is_stream(loader.dataset):
        return None
    try:
        return len(loader)
    except TypeError:
        return None


def repeats_in_workers(dataset: Any) -> bool:
    """Whether ``dataset`` is a stream that gives every DataLoader worker the same samples: its first sample in a second
    worker equals its first in the first (workers hand over their samples in turn), both workers seeded alike, so
    that random augmentation does not hide a stream each reads whole. A stream that splits itself across workers
    differs there; one of random samples alone, from torch's, Python's or NumPy's generator, reads as repeated.

    A stream that fails in a worker reads as not repeated: its trials with workers fail alike, and a failure in a
    DataLoader worker rules out every configuration with workers (``study/space.py``), as a map-style dataset's
    does. A map-style dataset's workers each load the indices the DataLoader hands them: not repeated."""
    if not is_stream(dataset):
        return False
    try:  # starting them pickles the stream where workers are spawned, not forked
        samples = iter(DataLoader(dataset, batch_size=None, num_workers=2, worker_init_fn=_same_seed))
    except Exception:
        return False
    try:
        first, second = next(samples, None), next(samples, None)
    except Exception:
        return False
    finally:
        samples._shutdown_workers()  # at once, though an exception's traceback still holds the iterator
    return first is not None and second is not None and same_sample(first, second)


def _same_seed(worker_id: int) -> None:
    torch.manual_seed(0)
    random.seed(0)
    numpy.random.seed(0)


def same_sample(a: Any, b: Any) -> bool:
    """Whether samples ``a`` and ``b`` hold the same values: tensors of one shape and dtype and equal elements (NaN
    equal to NaN), containers or dataclasses of such items, or equal plain values."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and _same_tensor(a, b)
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_sample(a[key], b[key]) for key in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(same_sample(x, y) for x, y in zip(a, b, strict=True))
    if dataclasses.is_dataclass(a) and not isinstance(a, type) and type(a) is type(b):
        return all(same_sample(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    try:
        return bool(a == b)
    except Exception:  # values with no truth to their comparison
        return False


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
