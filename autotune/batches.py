"""Walk a batch of any structure a data pipeline produces: move it to the training device, count its samples.

A batch is a tensor, an object that moves itself (``.to(device)``: a Hugging Face ``BatchEncoding``, a
``PackedSequence``), or a container walked value by value: a mapping (a ``BatchEncoding`` is a ``UserDict``), a
tuple, namedtuple or list, a dataclass instance; nested in any combination. Anything else is data that stays
where it is (strings, numbers).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.utils.rnn import PackedSequence

from autotune.errors import AutotuneError
from autotune.knobs.channels_last import ChannelsLastKnob

if TYPE_CHECKING:
    from autotune.knobs import TrainingSetup


def move(
    batch: Any,
    device: torch.device,
    non_blocking: bool = False,
    memory_format: torch.memory_format | None = None,
) -> Any:
    """``batch`` on ``device``, each container rebuilt as its own type, the tensors the channels_last knob takes
    (``ChannelsLastKnob.takes``: 4-D floating ones) in ``memory_format`` (None: as they come); ``non_blocking``
    copies asynchronously (from pinned memory). The batch given is left as it was."""
    if isinstance(batch, torch.Tensor):
        batch = batch.to(device, non_blocking=non_blocking)
        converted = memory_format not in (None, torch.contiguous_format)
        if converted and ChannelsLastKnob.takes(batch.dim(), batch.is_floating_point()):
            batch = batch.contiguous(memory_format=memory_format)
        return batch
    if callable(getattr(batch, "to", None)):
        # An object's own .to() knows what must stay behind (a PackedSequence's batch sizes stay on the host);
        # non_blocking is passed only when asked, so that a .to(device) without it works too.
        return batch.to(device, non_blocking=True) if non_blocking else batch.to(device)
    values = _values(batch)
    if values is None:
        return batch
    return _rebuild(batch, [move(value, device, non_blocking, memory_format) for value in values])


def to_device(batch: Any, setup: TrainingSetup) -> Any:
    """``batch`` on ``setup``'s training device as its knobs say (``move``): 4-D float inputs in their memory layout,
    copied asynchronously from pinned memory."""
    return move(batch, setup.device, setup.non_blocking_copy, setup.input_memory_format)


def batch_len(batch: Any) -> int:
    """Samples in a batch, counted by its first part depth first (mapping values, sequence items, dataclass fields in
    their order): a tensor's leading dimension (a ``PackedSequence``'s sequences), or the length of a list or tuple
    of tensors or mappings nested in the batch that holds one item per sample: mappings, or tensors of different
    leading dimensions or of none (as detection and variable-length collates build). A nested list of tensors of
    one leading dimension counts its length only where another part of the batch counts the same, and that
    dimension otherwise (views of a batch, as ``default_collate`` builds them from list-valued samples)."""
    parts = _parts(batch, top=True)  # walked only as far as needed: it runs on every step of a timed loop
    first = next(parts, None)
    if first is None:
        raise AutotuneError(f"cannot count the samples of a batch of type {type(batch).__name__}; pass step(samples=N)")
    kind, length, leading = first
    if kind != _SHARED:
        return length
    counted_elsewhere = any(other != _SHARED and count == length for other, count, _ in parts)
    return length if counted_elsewhere else leading


# The parts a batch's samples are counted by: a batched tensor (its leading dimension), a nested sequence of one
# item per sample (its length), and a nested sequence of tensors of one leading dimension (its length, or that).
_TENSOR, _PER_SAMPLE, _SHARED = "tensor", "per-sample", "shared"


def _parts(batch: Any, top: bool) -> Iterator[tuple[str, int, int | None]]:
    """``batch``'s parts, depth first, as (kind, count, shared leading dimension or None); a nested sequence is one
    part, not walked into."""
    if isinstance(batch, PackedSequence):  # a namedtuple whose first field holds every step of every sequence
        yield _TENSOR, int(batch.batch_sizes[0]), None
        return
    if isinstance(batch, torch.Tensor):
        if batch.dim() > 0:
            yield _TENSOR, batch.shape[0], None
        return
    if not top:
        sequence = _nested_sequence(batch)
        if sequence is not None:
            yield sequence
            return
    for value in _values(batch) or ():
        yield from _parts(value, top=False)


def _nested_sequence(batch: Any) -> tuple[str, int, int | None] | None:
    """A list or tuple (not a namedtuple) of tensors, or of mappings holding one, as a part; None for anything else."""
    if not isinstance(batch, (tuple, list)) or hasattr(type(batch), "_fields") or not batch:
        return None
    if all(isinstance(item, Mapping) for item in batch):
        return (_PER_SAMPLE, len(batch), None) if any(_holds_tensor(item) for item in batch) else None
    if not all(isinstance(item, torch.Tensor) for item in batch):
        return None
    leading = {item.shape[0] if item.dim() > 0 else None for item in batch}
    if len(leading) == 1 and None not in leading:
        return _SHARED, len(batch), leading.pop()
    return _PER_SAMPLE, len(batch), None


def _holds_tensor(batch: Any) -> bool:
    return isinstance(batch, torch.Tensor) or any(_holds_tensor(value) for value in _values(batch) or ())


def _values(batch: Any) -> list[Any] | None:
    """The values of a container, in order; None for anything that is not one."""
    if isinstance(batch, Mapping):
        return list(batch.values())
    if isinstance(batch, (tuple, list)):
        return list(batch)
    if dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        return [getattr(batch, name) for name in _init_fields(batch)]
    return None


def _rebuild(batch: Any, values: list[Any]) -> Any:
    """A new container of ``batch``'s type holding ``values`` in place of its own (``_values``' order)."""
    if isinstance(batch, Mapping):
        new = dict(zip(batch.keys(), values, strict=True))
        if type(batch) is dict:
            return new
        if isinstance(batch, MutableMapping):
            # A copy keeps what the mapping holds beside its items (a BatchEncoding's encodings), which its
            # constructor would not be given.
            rebuilt = copy.copy(batch)
            rebuilt.update(new)
            return rebuilt
        return type(batch)(new)
    if isinstance(batch, tuple) and hasattr(type(batch), "_fields"):  # a namedtuple takes its fields one by one
        return type(batch)(*values)
    if isinstance(batch, (tuple, list)):
        return type(batch)(values)
    return dataclasses.replace(batch, **dict(zip(_init_fields(batch), values, strict=True)))


def _init_fields(batch: Any) -> list[str]:
    """A dataclass's fields set by its constructor: those ``dataclasses.replace`` takes; the others derive."""
    return [item.name for item in dataclasses.fields(batch) if item.init]
