"""What an exception raised in a trial says: its text on one line, and whether memory ran out."""

from __future__ import annotations

import dis
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import torch

from autotune.errors import AutotuneError

_MESSAGE_LIMIT = 500
# A RuntimeError names a failed allocation when its message says memory ran out ("out of memory", "can't allocate
# memory", "cannot allocate memory"), carries a CUDA library's allocation status (*_ALLOC_FAILED,
# *_ALLOCATION_FAILED: cuBLAS, cuDNN, cuFFT, cuSOLVER, cuRAND), or says shared memory, where DataLoader workers put
# their batches, is full: torch reserves a batch's before writing it and says "unable to allocate shared memory(shm)
# for file </torch_...>: No space left on device (28)" (other errors of that reservation too), and, where it could
# not reserve it, "unable to write to file </torch_...>: No space left on device".
_ALLOCATION_FAILED = re.compile(
    r"out of memory|(can't|cannot) allocate memory|_ALLOC(ATION)?_FAILED|"
    r"unable to allocate shared memory\(shm\) for file </torch_|"
    r"unable to (write to file|open shared memory object) </torch_[^>]*>[^:]*: No space left on device",
    re.I,
)
# A DataLoader worker killed by SIGBUS, as the DataLoader words it ("... is killed by signal: Bus error. It is possible
# that dataloader's workers are out of shared memory"), whatever the cause: ``worker_bus_error`` tells.
_WORKER_BUS_ERROR = re.compile(r"killed by signal: Bus error", re.I)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc``, or an exception behind it (``_chained``), says an allocation failed, of any allocator:
    ``MemoryError`` (the host), ``torch.OutOfMemoryError`` (an accelerator's caching allocator), a RuntimeError
    naming an allocation failure (``_ALLOCATION_FAILED``), or a DataLoader worker killed by SIGBUS where
    ``worker_bus_error`` finds shared memory ran out: a configuration too big for the memory, not a fault."""
    return any(
        isinstance(each, (MemoryError, torch.OutOfMemoryError))
        or (isinstance(each, RuntimeError) and _names_allocation_failure(str(each)))
        for each in _chained(exc)
    )


def _names_allocation_failure(message: str) -> bool:
    if _ALLOCATION_FAILED.search(message):
        return True
    return _WORKER_BUS_ERROR.search(message) is not None and worker_bus_error().out_of_memory


def _chained(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions behind it that say what it is, each once: the one it was raised from
    (``__cause__``), and the one being handled as it was raised (``__context__``) where the handler that caught that
    one raised it (``_raised_by_handler``): user code that catches an out of memory and raises its own error over it
    without ``from`` (or ``from None``, which hides it from the traceback only). A chain may loop, so each is visited
    once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        each = pending.pop()
        if each is None or id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        pending.append(each.__cause__)
        if _raised_by_handler(each, each.__context__):
            pending.append(each.__context__)


_RAISE = dis.opmap["RAISE_VARARGS"]


def _raised_by_handler(exc: BaseException, handled: BaseException | None) -> bool:
    """Whether ``exc`` was raised by a ``raise`` statement of the frame that caught ``handled``: that handler's own
    word on what it caught (an error of its own, with a message or none), so ``handled`` says what ``exc`` is. One
    raised deeper, by code the handler called (a retry at a smaller size, a cleanup, a log call), or by an operation
    of the handler's that failed, is a failure of its own, which ``handled`` only came before: an unrelated error
    after an out of memory is not out of memory. Without both tracebacks (exceptions made, not raised), no."""
    if handled is None or handled.__traceback__ is None:
        return False
    catcher = handled.__traceback__.tb_frame  # its outermost frame: the one it had reached when caught
    entry = exc.__traceback__
    while entry is not None:
        if entry.tb_frame is catcher and _is_raise(entry):
            return True
        entry = entry.tb_next
    return False


def _is_raise(entry: TracebackType) -> bool:
    """Whether the instruction ``entry`` stopped at is a ``raise`` statement's."""
    code = entry.tb_frame.f_code.co_code
    return 0 <= entry.tb_lasti < len(code) and code[entry.tb_lasti] == _RAISE


SHARED_MEMORY = "/dev/shm"


@dataclass(frozen=True)
class BusError:
    """What a DataLoader worker killed by SIGBUS shows (``worker_bus_error``): whether memory ran out, and what most
    likely killed it, as a clause ("most likely as ...")."""

    out_of_memory: bool
    cause: str


def worker_bus_error() -> BusError:
    """What a DataLoader worker's death by SIGBUS most likely was, by ``SHARED_MEMORY`` as it is now, read while the
    failure is handled (the loader's batches still held).

    Where it is a tmpfs, torch reserves a batch's shared memory before writing it, and where none is left says so in
    an error (``_ALLOCATION_FAILED``: out of memory), so shared memory running out kills no worker there: its SIGBUS
    is most likely a memory-mapped file the dataset reads that is shorter than when it was mapped (truncated or
    replaced), a fault of the pipeline, not a verdict on the configuration. Elsewhere (another filesystem, or none to
    read) a worker that writes its batch to full shared memory dies of SIGBUS, the likelier cause: out of memory, with
    the other named."""
    found = _shared_memory()
    if found is None or found[0] != "tmpfs":
        return BusError(
            True,
            f"most likely as shared memory ({SHARED_MEMORY}), where workers hand over their batches, ran out (or a "
            "memory-mapped file the dataset reads is shorter than when it was mapped)",
        )
    _, free_mb, size_mb = found
    return BusError(
        False,
        "most likely as a memory-mapped file the dataset reads became shorter than when it was mapped (truncated or "
        "replaced while in use): shared memory running out raises an error instead (torch reserves each batch's in "
        f"{SHARED_MEMORY}, a tmpfs with {free_mb:.0f} MB of {size_mb:.0f} MB free, before writing it)",
    )


def _shared_memory() -> tuple[str, float, float] | None:
    """``SHARED_MEMORY``'s filesystem (by the mount that holds it: the last of the longest mount points above it),
    free and total MB; None where it cannot be read (no such folder, not Linux)."""
    try:
        usage = shutil.disk_usage(SHARED_MEMORY)
        mounts = [line.split() for line in Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()]
    except OSError:
        return None
    holding = [fields for fields in mounts if len(fields) > 2 and _holds(fields[1], SHARED_MEMORY)]
    if not holding:
        return None
    deepest = max(len(fields[1]) for fields in holding)
    filesystem = [fields[2] for fields in holding if len(fields[1]) == deepest][-1]
    return filesystem, usage.free / 2**20, usage.total / 2**20


def _holds(mount_point: str, path: str) -> bool:
    return mount_point == "/" or path == mount_point or path.startswith(mount_point + "/")


def exception_text(exc: BaseException) -> str:
    """``exc`` as one line, "Type: message", at most 500 characters; an error re-raised from a DataLoader worker
    carries its traceback, of which the first and last lines are kept. autotune's own errors, which name the key
    they are about (a pipeline component that failed to build), go without their type."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    if len(lines) > 1 and "Traceback" in str(exc):
        lines = [lines[0].rstrip("."), lines[-1]]
    kind = "" if isinstance(exc, AutotuneError) else f"{type(exc).__name__}: "
    return f"{kind}{': '.join(lines)}"[:_MESSAGE_LIMIT]
