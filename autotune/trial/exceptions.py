"""What an exception raised in a trial says: its text on one line, and whether memory ran out."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from autotune.errors import AutotuneError

_MESSAGE_LIMIT = 500
# A RuntimeError names a failed allocation when its message says memory ran out ("out of memory", "can't allocate
# memory", "cannot allocate memory"), carries a CUDA library's allocation status (*_ALLOC_FAILED,
# *_ALLOCATION_FAILED: cuBLAS, cuDNN, cuFFT, cuSOLVER, cuRAND), or says shared memory, where DataLoader workers put
# their batches, is full: a torch that reserves a batch's before writing it (``reserves_shared_memory_up_front``) says
# "unable to allocate shared memory(shm) for file </torch_...>: No space left on device (28)" (other errors of that
# reservation too), and, where it could not reserve it, "unable to write to file </torch_...>: No space left on
# device".
_ALLOCATION_FAILED = re.compile(
    r"out of memory|(can't|cannot) allocate memory|_ALLOC(ATION)?_FAILED|"
    r"unable to allocate shared memory\(shm\) for file </torch_|"
    r"unable to (write to file|open shared memory object) </torch_[^>]*>[^:]*: No space left on device",
    re.I,
)
# A torch version's major and minor, and whether a release follows them (not a pre-release: "a0", ".dev", "rc").
_VERSION = re.compile(r"(?P<major>\d+)\.(?P<minor>\d+)(?P<release>(?:\.\d+)*(?:[+-]|\.post|$))?")
# A DataLoader worker killed by SIGBUS, as the DataLoader words it ("... is killed by signal: Bus error. It is possible
# that dataloader's workers are out of shared memory"), whatever the cause: ``worker_bus_error`` tells.
_WORKER_BUS_ERROR = re.compile(r"killed by signal: Bus error", re.I)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception behind it (``_chained``), says an allocation failed, of any allocator:
    ``MemoryError`` (the host), ``torch.OutOfMemoryError`` (an accelerator's caching allocator), a RuntimeError
    naming an allocation failure (``_ALLOCATION_FAILED``), or a DataLoader worker killed by SIGBUS where
    ``worker_bus_error`` takes it for shared memory running out: a configuration too big for the memory, not a
    fault."""
    return any(
        isinstance(each, (MemoryError, torch.OutOfMemoryError))
        or (isinstance(each, RuntimeError) and _names_allocation_failure(str(each)))
        for each in _chained(exc)
    )


def _names_allocation_failure(message: str) -> bool:
    if _ALLOCATION_FAILED.search(message):
        return True
    return _WORKER_BUS_ERROR.search(message) is not None and not reserves_shared_memory_up_front()


def _chained(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception behind it, each once: those it was raised from (``__cause__``) and those being
    handled as it was raised (``__context__``), which user code that catches an out of memory and raises its own
    error without ``from`` (or ``from None``, which hides it from the traceback only) leaves it, wherever in the
    handler it was raised (a ``raise`` of its own, a helper it calls, a context manager's ``__exit__``). An error
    raised while an out of memory is handled is far more often caused by it than not, and calling an unrelated one
    out of memory costs less (larger batches ruled out) than missing a real one (the search proposing batches that
    do not fit, each a fault). A chain may loop (an exception re-raised while it is handled), so each is visited
    once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        each = pending.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        pending += [each.__context__, each.__cause__]


def reserves_shared_memory_up_front() -> bool:
    """Whether this process's torch reserves each batch's shared memory before a DataLoader worker writes it (torch
    2.10 on, pytorch PR #161910): a full /dev/shm then raises the allocation error (``_ALLOCATION_FAILED``), where an
    older torch's worker writing its batch there dies of SIGBUS. Its release is read by ``_VERSION``, not compared as
    PEP 440 has it (a local build's "2.10.0-custom" is none, and the comparison raises: here, while an exception is
    handled). A pre-release of 2.10 itself, or a version read no number from, counts as older (a SIGBUS then taken
    for out of memory costs less than an out of memory taken for a fault); a pre-release of a later one has it."""
    version = _VERSION.match(str(torch.__version__))
    if version is None:
        return False
    minor = (int(version["major"]), int(version["minor"]))
    return minor > (2, 10) or (minor == (2, 10) and version["release"] is not None)


@dataclass(frozen=True)
class BusError:
    """What a DataLoader worker killed by SIGBUS most likely was (``worker_bus_error``): whether memory ran out, and
    why, as a clause ("most likely ...")."""

    out_of_memory: bool
    cause: str


def worker_bus_error() -> BusError:
    """What a DataLoader worker's death by SIGBUS most likely was, by this process's torch. Where it reserves each
    batch's shared memory up front (``reserves_shared_memory_up_front``), shared memory running out kills no worker:
    its SIGBUS is most likely a memory-mapped file the dataset reads that became shorter than when it was mapped, a
    fault of the pipeline, not a verdict on the configuration. With an older torch, a worker writing its batch to a
    full /dev/shm dies of SIGBUS, the likelier cause: out of memory, with the other cause named."""
    if reserves_shared_memory_up_front():
        return BusError(
            False,
            "most likely a memory-mapped file the dataset reads became shorter than when it was mapped (truncated or "
            f"replaced while in use): torch {torch.__version__} reserves each batch's shared memory before writing it, "
            "and a full /dev/shm raises an error instead",
        )
    return BusError(
        True,
        "most likely as shared memory (/dev/shm), where workers hand over their batches, ran out (or a memory-mapped "
        "file the dataset reads became shorter than when it was mapped)",
    )


def exception_text(exc: BaseException) -> str:
    """``exc`` as one line, "Type: message", at most 500 characters; an error re-raised from a DataLoader worker
    carries its traceback, of which the first and last lines are kept. autotune's own errors, which name the key
    they are about (a pipeline component that failed to build), go without their type."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback" in str(exc):
        lines = [lines[0].rstrip("."), lines[-1]]
    kind = "" if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: "
    return f"{kind}{': '.join(lines)}"[:_MESSAGE_LIMIT]
