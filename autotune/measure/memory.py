"""Memory of a process tree (a process and its children, e.g. DataLoader workers)."""

from __future__ import annotations

import psutil

MIB = 1024 * 1024


def tree_memory_bytes(root: psutil.Process, metric: str) -> int:
    """Current memory of ``root`` and all its descendants; processes that exit meanwhile are skipped.

    ``metric`` "pss" splits shared pages between the processes sharing them, so forked workers
    are not counted twice; "rss" counts them in every process.
    """
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


def tree_memory_reader(pid: int):
    """A ``read()`` for PeriodicSampler: the tree's memory in bytes, None once the root is gone; and its metric."""
    root = psutil.Process(pid)
    metric = best_metric(root)

    def read() -> int | None:
        try:
            return tree_memory_bytes(root, metric)
        except psutil.NoSuchProcess:
            return None

    return read, metric
