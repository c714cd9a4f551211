"""What an exception raised in a trial says: its text on one line, and whether memory ran out."""

from __future__ import annotations

import re
from collections.abc import Iterator

import torch

from autotune.errors import AutotuneError

_MESSAGE_LIMIT = 500
# A RuntimeError names a failed allocation when its message says memory ran out ("out of memory", "can't allocate
# memory", "cannot allocate memory"), carries a CUDA library's allocation status (*_ALLOC_FAILED,
# *_ALLOCATION_FAILED: cuBLAS, cuDNN, cuFFT, cuSOLVER, cuRAND), or says shared memory, where DataLoader workers put
# their batches, is full ("unable to write to file </torch_...>: No space left on device"; a worker killed by
# SIGBUS, as the DataLoader words it: "It is possible that dataloader's workers are out of shared memory", as a
# trial's worker killed so is: ``worker._WORKER_OUT_OF_MEMORY``).
_ALLOCATION_FAILED = re.compile(
    r"out of memory|(can't|cannot) allocate memory|_ALLOC(ATION)?_FAILED|"
    r"unable to (write to file|open shared memory object) </torch_[^>]*>[^:]*: No space left on device|"
    r"workers are out of shared memory",
    re.I,
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception behind it (``_chained``), says an allocation failed, of any allocator:
    ``MemoryError`` (the host), ``torch.OutOfMemoryError`` (an accelerator's caching allocator), or a RuntimeError
    naming an allocation failure (``_ALLOCATION_FAILED``): a configuration too big for the memory, not a fault."""
    return any(
        isinstance(each, (MemoryError, torch.OutOfMemoryError))
        or (isinstance(each, RuntimeError) and _ALLOCATION_FAILED.search(str(each)) is not None)
        for each in _chained(exc)
    )


def _chained(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception behind it, each once: those it was raised from (``__cause__``) and those being
    handled as it was raised (``__context__``), which user code that catches an out of memory and raises its own
    error without ``from`` (or ``from None``, which hides it from the traceback only) leaves it. A chain may loop
    (an exception re-raised while it is handled), so each is visited once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        each = pending.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        pending += [each.__context__, each.__cause__]


def exception_text(exc: BaseException) -> str:
    """``exc`` as one line, "Type: message", at most 500 characters; an error re-raised from a DataLoader worker
    carries its traceback, of which the first and last lines are kept. autotune's own errors, which name the key
    they are about (a pipeline component that failed to build), go without their type."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback" in str(exc):
        lines = [lines[0].rstrip("."), lines[-1]]
    kind = "" if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: "
    return f"{kind}{': '.join(lines)}"[:_MESSAGE_LIMIT]
