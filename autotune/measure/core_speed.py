"""How fast the cores run right now, read from outside a run: a fixed pure-Python loop timed on each core in turn.

A core can run slower for seconds while the process on it keeps the CPU the whole time (a neighbour on the host's
physical core, a lower clock): nothing inside a run, whose CPU readings show its process busy and no other, can
see it, yet every figure of that run reads low (``benchmarks/host_speed.py`` measures such stretches). So the tuner
reads its cores just before a run's process starts and just after it ended, when nothing of the run is left on
them, and a run around which they read slow (``CoreSpeed.slow``) is counted as disturbed, as one that other
processes slowed. A reading is the median of ``REPEATS`` timings of a loop of ~5 ms on each core: a core that gives
the loop only part of each few milliseconds (a hypervisor's or a CPU quota's slices, which the guest may count as
the loop's own time) reads slow, as one running at part of its speed does, where the best of a few shorter loops
slips between the slices; one passing interrupt does not count. It imports no torch: the tuner's process reads it.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import ClassVar

LOOP = 220_000  # about 5 ms on the Xeon of 2026-12-04: a reading of two cores takes ~30 ms
REPEATS = 3
# Readings a gauge takes before its first run's, so that its usual speed does not rest on one run's readings.
FIRST_READINGS = 4
# The most cores one reading times (~15 ms each): on a machine of many, each reading takes the next ones in turn.
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
    """The cores a run used, read just before its process started (``before_ms``) and just after it ended
    (``after_ms``): per core, ``core_times_ms``; ``usual_ms``: the median of every core time the tuner read so far.
    A core time ``SLOW`` times the usual or more says the cores ran slow around the run; a quiet host's readings
    stay within a few per cent of their median (docs/benchmarks.md, Known limits)."""

    before_ms: list[float]
    after_ms: list[float]
    usual_ms: float

    SLOW: ClassVar[float] = 1.3

    @property
    def slowdown(self) -> float:
        """The slowest core time around the run, as a multiple of the usual one."""
        return max([*self.before_ms, *self.after_ms]) / self.usual_ms

    @property
    def slow(self) -> bool:
        return self.slowdown >= self.SLOW

    @property
    def disturbance(self) -> str | None:
        """The slowdown in words ("the cores ran 1.4x slow"); None where they kept their speed."""
        return f"the cores ran {self.slowdown:.1f}x slow" if self.slow else None


class CoreGauge:
    """Reads ``cores`` (None: every core this process may use) around runs, ``CORES_A_READING`` of them a
    reading, each reading the next ones in turn, and keeps every core time it read: their median is the usual speed
    each run's readings are judged against. ``read`` times the cores it is given (``core_times_ms`` by default)."""

    def __init__(
        self, cores: Iterable[int] | None = None, read: Callable[[list[int]], list[float]] = core_times_ms
    ) -> None:
        self.cores = tuple(sorted(os.sched_getaffinity(0) if cores is None else cores))
        self._read = read
        self._times: list[float] = []
        self._next = 0

    def before(self) -> list[float]:
        """A reading just before a run's process starts (the first run's follows ``FIRST_READINGS`` more)."""
        for _ in range(FIRST_READINGS if not self._times else 0):
            self._reading()
        return self._reading()

    def after(self, before_ms: list[float]) -> CoreSpeed:
        """A reading just after the run's process ended, with ``before_ms`` judged against the usual speed."""
        return CoreSpeed(before_ms, self._reading(), statistics.median(self._times))

    def _reading(self) -> list[float]:
        count = min(CORES_A_READING, len(self.cores))
        cores = [self.cores[(self._next + index) % len(self.cores)] for index in range(count)]
        self._next = (self._next + count) % len(self.cores)
        times = self._read(cores)
        self._times += times
        return times
