"""Fresh pages the training process faults in, and its time in the kernel, over a block of training steps: read from
``getrusage`` (a microsecond call) at the block's edges.

A step that faults in megabytes of fresh pages is usually the allocator giving freed memory back to the kernel and
asking for it again at the next step (glibc's malloc returns large freed blocks); the kernel then maps and zeroes
those pages every step, time the process spends in the kernel (``system_s``) rather than in its own code.
"""

from __future__ import annotations

import os
import resource
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class PageFaults:
    """Over ``steps`` training steps, the minor page faults of the training process (``minor_faults``: pages mapped
    without waiting for a disk, each at least one base page of ``page_bytes``; a huge page or a file's read-around
    maps more), and the CPU seconds its threads spent in its own code (``user_s``) and in the kernel (``system_s``)."""

    steps: int
    minor_faults: int
    user_s: float
    system_s: float
    page_bytes: int

    @property
    def mb_per_step(self) -> float:
        """Megabytes of fresh pages faulted in a step, at least (faults times the base page)."""
        return self.minor_faults * self.page_bytes / 2**20 / max(self.steps, 1)

    @property
    def kernel_share(self) -> float:
        """The share of the process's CPU time spent in the kernel."""
        busy = self.user_s + self.system_s
        return self.system_s / busy if busy > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PageFaults:
        return cls(**data)


class FaultWatch:
    """``with FaultWatch() as watch:`` around a block of training steps; ``watch.over(steps)`` after it: the block's
    page faults over its ``steps`` steps."""

    def __init__(self) -> None:
        self._delta: tuple[float, ...] | None = None

    def __enter__(self) -> FaultWatch:
        self._start = _usage()
        return self

    def __exit__(self, *exc_info) -> None:
        self._delta = tuple(end - start for end, start in zip(_usage(), self._start, strict=True))

    def over(self, steps: int) -> PageFaults:
        """What the block faulted in, it having run ``steps`` training steps (after the block only)."""
        if self._delta is None:
            raise RuntimeError("FaultWatch.over is read after its with-block")
        minor, user, system = self._delta
        return PageFaults(steps, minor, user, system, os.sysconf("SC_PAGE_SIZE"))


def _usage() -> tuple[int, float, float]:
    """This process's minor faults, user and system CPU seconds so far (all its threads)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_minflt, usage.ru_utime, usage.ru_stime
