"""The data pipeline's two stages timed where they run, batch by batch.

A DataLoader fetches a batch's samples (``__getitem__``, or ``__getitems__`` where the dataset has it; the next ones
of a stream) and collates them in the process that makes the batch: a worker, or the training process without
workers. ``InstrumentedData`` (``InstrumentedStream`` for a stream) wraps the dataset and the
collate function so that each batch carries what making it cost in that process (``Instrumented``), and, with
``profile``, cProfile's statistics of that work: the figures travel back with the batch through the DataLoader's own
queue, from any worker, with no file or side channel.
"""

from __future__ import annotations

import cProfile
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from torch.utils.data import IterableDataset, default_collate
from torch.utils.data._utils.pin_memory import pin_memory

from autotune.measure.hotspots import Stats


@dataclass(frozen=True)
class Instrumented:
    """A collated ``batch`` of ``samples`` samples and what making it cost in process ``pid``: ``fetch_s`` in the
    dataset, ``collate_s`` in the collate function, and their cProfile ``stats`` where profiled (else None)."""

    batch: Any
    samples: int
    fetch_s: float
    collate_s: float
    pid: int
    stats: Stats | None = None

    def pin_memory(self) -> Instrumented:
        """The DataLoader's pin-memory thread calls this: the batch is pinned as it would be unwrapped."""
        return replace(self, batch=pin_memory(self.batch))


class InstrumentedData:
    """``dataset`` and ``collate_fn`` (None: PyTorch's default) timed: pass the object as the DataLoader's dataset
    and its ``collate`` as its collate function; each batch comes out as an ``Instrumented``. With ``profile``, both
    run under cProfile (which slows them: a profiled run times nothing else). A copy lives in each worker."""

    def __init__(self, dataset: Any, collate_fn: Callable | None, profile: bool = False) -> None:
        self.dataset, self.collate_fn, self.profile = dataset, collate_fn or default_collate, profile
        self._fetch_s, self._samples = 0.0, 0
        self._profiler: cProfile.Profile | None = None

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        self._samples += 1
        return self._run(self.dataset.__getitem__, index, fetching=True)

    @property
    def __getitems__(self) -> Callable | None:
        # The DataLoader fetches a batch at once where the dataset has __getitems__ (a truthy attribute), else
        # sample by sample: the wrapper offers it exactly where the dataset does.
        fetch_many = getattr(self.dataset, "__getitems__", None)
        if not fetch_many:
            return None

        def fetch(indices: list) -> Any:
            self._samples += len(indices)
            return self._run(fetch_many, indices, fetching=True)

        return fetch

    def collate(self, samples: list) -> Instrumented:
        """Collate ``samples`` and hand back the batch with what fetching and collating it cost."""
        start = time.perf_counter()
        batch = self._run(self.collate_fn, samples, fetching=False)
        collate_s = time.perf_counter() - start
        stats = None
        if self._profiler is not None:
            self._profiler.create_stats()
            stats, self._profiler = self._profiler.stats, None
        made = Instrumented(batch, self._samples, self._fetch_s, collate_s, os.getpid(), stats)
        self._fetch_s, self._samples = 0.0, 0
        return made

    def _run(self, function: Callable, argument: Any, fetching: bool) -> Any:
        if self.profile and self._profiler is None:
            self._profiler = cProfile.Profile()
        start = time.perf_counter()
        if self._profiler is not None:
            self._profiler.enable()
        try:
            return function(argument)
        finally:
            if self._profiler is not None:
                self._profiler.disable()
            if fetching:
                self._fetch_s += time.perf_counter() - start


class InstrumentedStream(InstrumentedData, IterableDataset):
    """``InstrumentedData`` for a stream (an IterableDataset): fetching is drawing its next sample. Each worker
    iterates its own copy, as it would the stream itself."""

    def __iter__(self) -> Iterator[Any]:
        samples = self._run(iter, self.dataset, fetching=True)
        while True:
            try:
                sample = self._run(next, samples, fetching=True)
            except StopIteration:
                # The samples drawn since the last batch make none (drop_last): what they cost is no batch's.
                self._fetch_s, self._samples, self._profiler = 0.0, 0, None
                return
            self._samples += 1
            yield sample
