"""How fast the cores run right now, read from outside a run: a fixed pure-Python loop timed on each core in turn.

A core can run slower for seconds while the process on it keeps the CPU the whole time (a neighbour on the host's
physical core, a lower clock): nothing inside a run, whose CPU readings show its process busy and no other, can see
it, yet every figure of that run reads low (``benchmarks/host_speed.py`` measures such stretches). So the tuner
reads the cores of each run where one run decides (``runner.TrialRunner``) just before its process starts and just
after it ended, when nothing of the run is left on them, and a run around which they read slow (``CoreSpeed.slow``)
is counted as disturbed, as one that other processes slowed. A reading is the median of ``REPEATS`` timings of a
loop of ~5 ms on each core: a core that gives the loop only part of each few milliseconds (a hypervisor's or a CPU
quota's slices, which the guest may count as the loop's own time) reads slow, as one running at part of its speed
does, where the best of a few shorter loops slips between the slices; one passing interrupt does not count. It
imports no torch: the tuner's process reads it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

LOOP = 220_000  # about 5 ms on the Xeon of 2026-12-04: a core's reading, three of them, takes ~15 ms
REPEATS = 3
# The times a core must have been read, each at a moment of its own, before a run is judged against its usual speed.
# Readings taken back to back catch a host in one state: where the cores flip between two speeds every few seconds,
# every run of the other state would read slow against a usual speed taken at one moment (docs/benchmarks.md
# section 13).
MOMENTS = 4
# The most cores read around one run (~15 ms each, twice): on a machine of many, each run reads the next ones in turn.
CORES_A_READING = 4


def loop_s(loop: int = LOOP) -> float:
    """Seconds the calling thread takes to count to ``loop`` in pure Python."""
    start, total = time.perf_counter(), 0
    for i in range(loop):
        total += i
    return time.perf_counter() - start


def core_times_ms(cores: Iterable[int]) -> list[float]:
    """The median of ``REPEATS`` timings of ``loop_s`` on each of ``cores``, in ms, the calling thread pinned to
    each in turn; its own affinity is restored afterwards."""
    mine = os.sched_getaffinity(0)
    times = []
    try:
        for core in cores:
            os.sched_setaffinity(0, {core})
            times.append(statistics.median(loop_s() for _ in range(REPEATS)) * 1e3)
    finally:
        os.sched_setaffinity(0, mine)
    return times


@dataclass(frozen=True)
class CoreSpeed:
    """The ``cores`` read around a run, just before its process started (``before_ms``) and just after it ended
    (``after_ms``), each a ``core_times_ms``, beside each core's usual time (``usual_ms``: the median of every time
    the gauge read on it so far, ``readings`` times on the least read core, this run's two included). A core time
    ``SLOW`` times its usual or more says the cores ran slow around the run; a quiet host's stay within a few per cent
    of it (docs/benchmarks.md section 13). Each core is judged against its own: a machine's cores need not run alike
    (a hybrid CPU's efficiency cores). Records stored before ``readings`` was kept were judged: they read
    ``MOMENTS``."""

    cores: list[int]
    before_ms: list[float]
    after_ms: list[float]
    usual_ms: list[float]
    readings: int = MOMENTS

    SLOW: ClassVar[float] = 1.3

    @property
    def slowdown(self) -> float:
        """The slowest core time around the run, as a multiple of that core's usual one."""
        return max(max(b, a) / u for b, a, u in zip(self.before_ms, self.after_ms, self.usual_ms, strict=True))

    @property
    def slow(self) -> bool:
        """Whether the cores read ``SLOW`` times their usual time or more, a usual time read at ``MOMENTS`` moments
        at least: before that it is not known."""
        return self.readings >= MOMENTS and self.slowdown >= self.SLOW


class Reading(NamedTuple):
    """A reading before a run: the cores read, and their times in ms."""

    cores: list[int]
    times_ms: list[float]


class CoreGauge:
    """Reads the cores of the runs it is given (``cores``; None: every core this process may use) around each, at
    most ``CORES_A_READING`` of them a run, the next ones in turn, and keeps every time it read on each core: their
    median is the core's usual speed, against which each run's readings are judged once it rests on ``MOMENTS``
    readings. ``read`` times the cores it is given (``core_times_ms`` by default); a reading the OS refuses (a core
    taken from this process) is no reading."""

    def __init__(
        self, cores: Iterable[int] | None = None, read: Callable[[list[int]], list[float]] = core_times_ms
    ) -> None:
        self.cores = tuple(sorted(os.sched_getaffinity(0) if cores is None else cores))
        self._read = read
        self._history: dict[int, list[float]] = {}
        self._next = 0

    def before(self) -> Reading | None:
        """The next cores in turn, read just before a run's process starts."""
        count = min(CORES_A_READING, len(self.cores))
        cores = [self.cores[(self._next + index) % len(self.cores)] for index in range(count)]
        self._next = (self._next + count) % len(self.cores)
        times = self._take(cores)
        return Reading(cores, times) if times is not None else None

    def after(self, before: Reading | None) -> CoreSpeed | None:
        """The cores of ``before`` read again just after the run's process ended, judged against their usual
        speed; None where either reading was refused."""
        after = self._take(before.cores) if before is not None else None
        if after is None:
            return None
        usual = [statistics.median(self._history[core]) for core in before.cores]
        readings = min(len(self._history[core]) for core in before.cores)
        return CoreSpeed(before.cores, before.times_ms, after, usual, readings)

    def _take(self, cores: list[int]) -> list[float] | None:
        try:
            times = self._read(cores)
        except OSError:
            return None
        for core, time_ms in zip(cores, times, strict=True):
            self._history.setdefault(core, []).append(time_ms)
        return times
