"""A background thread that reads a value periodically and keeps (time, value) samples."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class PeriodicSampler(Generic[T]):
    """Calls ``read()`` every ``interval_s`` on a daemon thread, and once on enter and exit.

    ``read`` may return None to skip a sample (e.g. a process that just exited). Timestamps come
    from ``clock`` so they can be compared with the step timings.
    """

    def __init__(self, read: Callable[[], T | None], interval_s: float, clock: Callable[[], float] = time.perf_counter):
        self._read = read
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="autotune-sampler", daemon=True)
        self.samples: list[tuple[float, T]] = []

    def __enter__(self) -> PeriodicSampler[T]:
        self.sample_now()
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stopping.set()
        self._thread.join()
        self.sample_now()

    def sample_now(self) -> T | None:
        """Take a sample immediately and return it."""
        value = self._read()
        if value is not None:
            with self._lock:
                self.samples.append((self._clock(), value))
        return value

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            self.sample_now()
