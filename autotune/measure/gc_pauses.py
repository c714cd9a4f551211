"""Python's garbage-collection pauses in the training process, counted and timed through ``gc.callbacks``."""

from __future__ import annotations

import gc
import time
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class GcPauses:
    """The collections that ran over ``wall_s`` seconds of the training process: how many of each generation
    (``collections[g]``), their total and longest pause in seconds."""

    wall_s: float
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    total_s: float = 0.0
    longest_s: float = 0.0

    @property
    def share(self) -> float:
        """The share of the wall time the process spent paused collecting."""
        return self.total_s / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GcPauses:
        return cls(**data)


class GcWatch:
    """``with GcWatch() as watch:`` times every collection inside the block; ``watch.pauses`` holds them after."""

    def __init__(self) -> None:
        self.pauses: GcPauses | None = None
        self._collections = [0, 0, 0]
        self._pauses: list[float] = []
        self._since = 0.0

    def __enter__(self) -> GcWatch:
        self._start = time.perf_counter()
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc_info) -> None:
        gc.callbacks.remove(self._callback)
        self.pauses = GcPauses(
            wall_s=time.perf_counter() - self._start,
            collections=self._collections,
            total_s=sum(self._pauses),
            longest_s=max(self._pauses, default=0.0),
        )

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._since = time.perf_counter()
        else:
            self._pauses.append(time.perf_counter() - self._since)
            self._collections[info["generation"]] += 1
