"""What an exception raised in a trial says: its text on one line, and whether memory ran out."""

from __future__ import annotations

import re

import torch

from autotune.errors import AutotuneError

_MESSAGE_LIMIT = 500
# A RuntimeError names a failed allocation when its message says memory ran out ("out of memory", "can't allocate
# memory", "cannot allocate memory"), carries a CUDA library's allocation status (*_ALLOC_FAILED,
# *_ALLOCATION_FAILED: cuBLAS, cuDNN, cuFFT, cuSOLVER, cuRAND), or says shared memory, where DataLoader workers put
# their batches, is full ("unable to write to file </torch_...>: No space left on device").
_ALLOCATION_FAILED = re.compile(
    r"out of memory|(can't|cannot) allocate memory|_ALLOC(ATION)?_FAILED|"
    r"unable to (write to file|open shared memory object) </torch_[^>]*>[^:]*: No space left on device",
    re.I,
)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception it was raised from, says an allocation failed, of any allocator:
    ``MemoryError`` (the host), ``torch.OutOfMemoryError`` (an accelerator's caching allocator), or a RuntimeError
    naming an allocation failure (``_ALLOCATION_FAILED``): a configuration too big for the memory, not a fault."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, (MemoryError, torch.OutOfMemoryError)):
            return True
        if isinstance(cause, RuntimeError) and _ALLOCATION_FAILED.search(str(cause)):
            return True
        cause = cause.__cause__
    return False


def exception_text(exc: BaseException) -> str:
    """``exc`` as one line, "Type: message", at most 500 characters; an error re-raised from a DataLoader worker
    carries its traceback, of which the first and last lines are kept. autotune's own errors, which name the key
    they are about (a pipeline component that failed to build), go without their type."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback" in str(exc):
        lines = [lines[0].rstrip("."), lines[-1]]
    kind = "" if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: "
    return f"{kind}{': '.join(lines)}"[:_MESSAGE_LIMIT]
