"""CPU utilisation over an interval: of every core, and of the measured process tree."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import psutil

from autotune.measure.memory import tree_pids

T = TypeVar("T")


def tree_cpu_seconds(root: int) -> float:
    """User + system CPU time consumed so far by process ``root`` and its descendants, those that exited included.

    A child's time moves into its parent's ``children_*`` times when the parent reaps it (as
    DataLoader does with its workers at the end of an epoch), so live processes count their own
    time and their reaped children's, and nothing is counted twice.
    """
    total = 0.0
    for pid in tree_pids(root):
        try:
            times = psutil.Process(pid).cpu_times()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        reaped = getattr(times, "children_user", 0.0) + getattr(times, "children_system", 0.0)
        total += times.user + times.system + reaped
    return total


def busy_core_seconds() -> float:
    """CPU time the cores this process may run on (its affinity) have spent busy so far, whoever ran on them: idle
    and waiting for I/O are not busy; time a hypervisor took (steal) is, as no process here could use it."""
    idle = ("idle", "iowait")
    return sum(
        sum(value for field, value in core._asdict().items() if field not in idle and not field.startswith("guest"))
        for core in _usable(psutil.cpu_times(percpu=True))
    )


class OthersMeter:
    """The cores' worth of CPU other processes than this one and its descendants used on the cores it may run on,
    from its making to ``cores()``: over an interval of seconds, as the machine's counters are kept by the tick
    (and, on an idle core, late), so that shorter ones read past the cores there are."""

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self._start = self._reading()

    def cores(self) -> float:
        wall, machine, tree = (now - then for now, then in zip(self._reading(), self._start, strict=True))
        return max(0.0, (machine - tree) / wall) if wall > 0 else 0.0

    def _reading(self) -> tuple[float, float, float]:
        return self._clock(), busy_core_seconds(), tree_cpu_seconds(os.getpid())


@dataclass(frozen=True)
class CpuUsage:
    """``per_core_percent``: the busy share of each core this process may run on (its affinity: in a container
    pinned to some cores, the other tenants' cores are left out); ``tree_cores``: cores' worth of CPU the process
    tree used (2.0 = two cores fully busy), at most those cores."""

    total_percent: float
    per_core_percent: list[float]
    tree_cores: float


class CpuUsageMeter:
    """Call ``start()`` and ``stop()`` around an interval."""

    def __init__(self, pid: int, clock: Callable[[], float] = time.perf_counter) -> None:
        self._root = pid
        self._clock = clock
        self._tree_start = 0.0
        self._start = 0.0

    def start(self) -> None:
        psutil.cpu_percent(percpu=True)  # resets psutil's reference point
        self._tree_start = tree_cpu_seconds(self._root)
        self._start = self._clock()

    def stop(self) -> CpuUsage:
        elapsed_s = self._clock() - self._start
        per_core = _usable(psutil.cpu_percent(percpu=True))
        tree = tree_cpu_seconds(self._root) - self._tree_start
        # CPU time is counted in clock ticks (10 ms) per process: over a short interval (a profile's stage-timed
        # steps may take a tenth of a second) the reading can exceed the cores the tree may run on, which it cannot.
        cores = min(tree / elapsed_s, len(per_core)) if elapsed_s > 0 else 0.0
        return CpuUsage(total_percent=sum(per_core) / len(per_core), per_core_percent=per_core, tree_cores=cores)


def _usable(per_core: list[T]) -> list[T]:
    """The entries of ``per_core`` (indexed by CPU number) for the CPUs this process may run on."""
    if not hasattr(os, "sched_getaffinity"):
        return per_core
    return [per_core[cpu] for cpu in sorted(os.sched_getaffinity(0)) if cpu < len(per_core)] or per_core


def signal_name(number: int) -> str:
    """A signal's name, as SIGSEGV; one Python does not name (the real-time signals between SIGRTMIN and SIGRTMAX,
    which a POSIX timer may send) by its number and the C library's description."""
    try:
        return signal.Signals(number).name
    except ValueError:
        described = signal.strsignal(number)
        return f"signal {number}" + (f" ({described})" if described else "")
