"""Peak memory of a process tree (a process and its children, e.g. DataLoader workers)."""

from __future__ import annotations

import threading
from dataclasses import dataclass

import psutil

MIB = 1024 * 1024


@dataclass(frozen=True)
class MemoryPeak:
    """Peak of the summed memory of a process tree, in MiB, and the metric summed.

    ``metric`` is "pss" (proportional set size: shared pages split between the processes
    sharing them, so forked workers are not counted twice) where the OS reports it, else "rss".
    """

    peak_mb: float
    metric: str
    samples: int


def tree_memory_bytes(root: psutil.Process, metric: str) -> int:
    """Current memory of ``root`` and all its descendants; processes that exit meanwhile are skipped."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        try:
            info = proc.memory_full_info() if metric == "pss" else proc.memory_info()
            total += getattr(info, metric)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return total


def best_metric(proc: psutil.Process) -> str:
    """ "pss" where this OS reports it for ``proc``, else "rss"."""
    try:
        return "pss" if hasattr(proc.memory_full_info(), "pss") else "rss"
    except (psutil.AccessDenied, NotImplementedError):
        return "rss"


class TreeMemorySampler:
    """Samples a process tree's memory on a background thread and keeps the peak.

    PSS costs a few milliseconds per process per reading, so the default interval is
    coarse; a reading is also taken at start and stop.
    """

    def __init__(self, pid: int, interval_s: float = 0.5) -> None:
        self._root = psutil.Process(pid)
        self._metric = best_metric(self._root)
        self._interval_s = interval_s
        self._peak = 0
        self._samples = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-memory", daemon=True)

    def __enter__(self) -> TreeMemorySampler:
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopping.set()
        self._thread.join()
        self._sample()

    def result(self) -> MemoryPeak:
        return MemoryPeak(peak_mb=self._peak / MIB, metric=self._metric, samples=self._samples)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        try:
            self._peak = max(self._peak, tree_memory_bytes(self._root, self._metric))
            self._samples += 1
        except psutil.NoSuchProcess:
            self._stopping.set()
