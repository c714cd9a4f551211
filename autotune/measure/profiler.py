"""Measure a training loop you write yourself: ``with autotune.profile("train") as prof: ...``.

The tuner's trials measure with the same Profiler, so the figures mean the same in both.
"""

from __future__ import annotations

import math
import os
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

import torch
from torch.utils.data import DataLoader

from autotune.batches import batch_len
from autotune.measure.environment import describe_machine
from autotune.measure.flops import count_flops
from autotune.measure.gpu import DeviceTimeline, Nvml, cuda_peaks_mb, reset_cuda_peaks, synchronize
from autotune.measure.measurement import ComputeReport, Measurement, MemoryReport, SystemReport
from autotune.measure.memory import MIB, ProcessTree, TreeReading, fork_server_of, peak_estimate
from autotune.measure.recorder import DONE, DRAIN, WARMUP, WINDOW, StepRecorder, WindowPlan
from autotune.measure.sampler import PeriodicSampler
from autotune.measure.system import CpuUsageMeter


class Profiler:
    """Times a training loop step by step and samples memory and utilisation around it.

    Wrap the batch iterable with ``wrap()`` (the time blocked on it is data wait), call
    ``transferred()`` after moving a batch to the device (optional) and ``step()`` after each
    optimizer step. Warm-up ends when step times settle; after the window's start readings, and the untimed steps
    that use up what a DataLoader's workers loaded during them, the steps form the window.
    After the ``with`` block, ``result`` holds the Measurement.

    Inside the window the loop runs as it would without the profiler: each mark reads the clock, the
    memory sampler reads only resident sizes (microseconds), and on a GPU nothing waits for the device (the
    window ends once the device has finished its work; CUDA events time a sample of steps). Costly reads
    (PSS of the process tree, CPU times) run at the window's edges, outside it.
    """

    def __init__(
        self,
        name: str = "train",
        device: str | torch.device = "cpu",
        plan: WindowPlan | None = None,
        memory_interval_s: float = 0.5,
        compiling: bool = False,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.name = name
        self.device = torch.device(device)
        plan = plan or WindowPlan.unbounded()
        self.plan = replace(plan, warmup=plan.warmup.on(self.device.type))  # the warm-up's minimum time is the device's
        self.compiling = compiling
        self.recorder = StepRecorder(self.plan, clock)
        self.result: Measurement | None = None
        self._clock = clock
        self._memory_interval_s = memory_interval_s
        self._last_batch: Any = None
        self._flops_per_sample: float | None = None
        self._flops_note = "FLOPs not counted (Profiler.count_flops was not called)"
        self._full_reads: list[TreeReading] = []
        self._timeline = DeviceTimeline(self.device) if self.device.type == "cuda" else None
        self._prepared = 0

    @property
    def done(self) -> bool:
        """Whether the timed window is complete (never, for an unbounded plan)."""
        return self.recorder.done

    def __enter__(self) -> Profiler:
        reset_cuda_peaks(self.device)
        self._tree = ProcessTree(os.getpid(), self._clock, fork_server_of(os.environ))
        self._full_reads.append(self._tree.read_full())
        self._memory = PeriodicSampler(self._tree.read_cheap, self._memory_interval_s, self._clock)
        self._nvml = Nvml(self.device)
        self._gpu = PeriodicSampler(self._nvml.read, self._memory_interval_s, self._clock)
        self._cpu = CpuUsageMeter(os.getpid(), self._clock)
        self._cpu_usage = None
        self._memory.__enter__()
        self._gpu.__enter__()
        self.recorder.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.recorder.phase == WINDOW:
            self._close_window()
            if self.plan.bounded and exc_type is None:
                warnings.warn(self._short_window_warning(), stacklevel=2)
        self._gpu.__exit__(exc_type, exc, tb)
        self._memory.__exit__(exc_type, exc, tb)
        self._nvml.close()
        if exc_type is None:
            self.result = self._measurement()

    def wrap(self, batches: Iterable[Any], prepared: int | None = None) -> Iterator[Any]:
        """Yield from ``batches``, marking when each batch arrives. ``prepared``: how many batches the source
        loads ahead of the loop (``prepared_ahead``; by default read from ``batches`` where it is a DataLoader)."""
        self._prepared = prepared_ahead(batches) if prepared is None else prepared
        for batch in batches:
            self.recorder.batch_ready()
            if self._timeline and self.recorder.phase == WINDOW:
                self._timeline.batch_ready()
            self._last_batch = batch
            yield batch

    def transferred(self) -> None:
        """Mark the batch as copied to the device (and converted to its memory layout)."""
        self.recorder.batch_transferred()
        if self._timeline and self.recorder.phase == WINDOW:
            self._timeline.batch_transferred()

    def step(self, samples: int | None = None) -> None:
        """Mark the end of a training step of ``samples`` samples (default: the last batch's size).

        During warm-up (never timed) a GPU step is waited for, so that warm-up sees the device's step times.
        """
        before = self.recorder.phase
        if before == WARMUP:
            synchronize(self.device)
        samples = samples if samples is not None else batch_len(self._last_batch)
        self.recorder.step_done(samples)
        if before == WINDOW and self._timeline:
            self._timeline.step_done(samples)
        if before == WARMUP and self.recorder.phase != WARMUP:
            self._take_start_readings()
        if before != WINDOW and self.recorder.phase == WINDOW:
            self._open_window(drained=before == DRAIN)
        if before == WINDOW and self.recorder.phase == DONE:
            self._close_window()

    def count_flops(self, run_step: Callable[[], object], samples: int) -> None:
        """Count the FLOPs of ``run_step()``, one training step over ``samples`` samples.

        Call it once the window is done (``prof.done``): it is a step the loop would not run, and a step run before
        the window can change the speed of those after it (it changes what the memory allocator holds). The memory
        figures are those of the loop up to the window's end, without it. A step that raises here (an eager step
        needs more memory than a compiled one, and the loop's memory is still held) leaves the FLOPs uncounted, with
        a note why: the loop it follows ran, and its figures stand.
        """
        try:
            self._flops_per_sample = count_flops(run_step) / samples
        except Exception as error:  # whatever the extra step raised, the loop's figures stand
            said = str(error).strip().splitlines()[:1]
            self._flops_note = (
                f"FLOPs not counted: the eager step run to count them raised {': '.join([type(error).__name__, *said])}"
            )

    def _short_window_warning(self) -> str:
        progress = self.recorder.progress()
        steps, elapsed = (progress.steps, progress.elapsed_s) if progress else (0, 0.0)
        return (
            f"the loop ended before the timed window was complete ({steps} steps in {elapsed:.1f} s; the plan asks "
            f"for {self.plan.min_steps} steps and {self.plan.min_time_s:g} s at least): the figures rest on a shorter "
            "window than asked; loop over more epochs until prof.done"
        )

    def _take_start_readings(self) -> None:
        """Take the readings of the window's start, untimed; then the loop uses up, untimed too, the batches the
        loader's workers prepared while it paused for them, as it does not pause so in a loop of its own."""
        began = self._clock()
        self._full_reads.append(self._tree.read_full())
        self.recorder.drain(self._loaded_meanwhile(self._clock() - began))

    def _loaded_meanwhile(self, paused_s: float) -> int:
        """How many batches the loader's workers may have loaded during a pause of ``paused_s``: no more than they
        load ahead, and, where the loop waits for them, about one a step (the warm-up's settled step time); where
        it does not, their queue was full before the pause and gains nothing."""
        step_s = self.recorder.settled_step_s
        if not self._prepared or step_s <= 0:
            return self._prepared
        return min(self._prepared, math.ceil(paused_s / step_s) + 1)

    def _open_window(self, drained: bool) -> None:
        """Start the window's clock; after drained steps, on a GPU, once the device has done their work (it waited
        for each warm-up step)."""
        if drained:
            synchronize(self.device)
        self._cpu.start()
        self.recorder.restart_window()
        if self._timeline:
            self._timeline.start(self.recorder.settled_step_s)

    def _close_window(self) -> None:
        """End the window (on a GPU once the device is done with the work queued), then take its end readings."""
        if self._timeline:
            synchronize(self.device)
            self.recorder.end_window_at(self._clock())
        self._cpu_usage = self._cpu.stop()
        self._full_reads.append(self._tree.read_full())
        self._peaks_at_end = self._tree.peak_rss(), cuda_peaks_mb(self.device)

    def _measurement(self) -> Measurement:
        timing = self.recorder.timing(self.compiling, self._timeline.split() if self._timeline else None)
        return Measurement(
            name=self.name,
            device=str(self.device),
            timing=timing,
            memory=self._memory_report(),
            compute=self._compute_report(timing.throughput),
            system=self._system_report(),
            environment=describe_machine(str(self.device)),
        )

    def _memory_report(self) -> MemoryReport:
        root_peak, (allocated, reserved) = self._peaks_at_end
        end_time = self._full_reads[-1].time
        gpu_used = [r.memory_used_mb for t, r in self._gpu.samples if t <= end_time and r.memory_used_mb is not None]
        full, tree = self._full_reads, self._tree
        cheap = [reading for _, reading in self._memory.samples if reading.time <= end_time]
        start, end = full[1], full[-1]  # full[0] is before the loop
        return MemoryReport(
            metric=tree.metric,
            peak_mb=peak_estimate(cheap, full, tree.root, root_peak) / MIB,
            window_start_mb=start.total / MIB,
            window_end_mb=end.total / MIB,
            samples=len(cheap) + len(full),
            cuda_peak_allocated_mb=allocated,
            cuda_peak_reserved_mb=reserved,
            nvml_used_peak_mb=max(gpu_used) if gpu_used else None,
        )

    def _compute_report(self, throughput: float) -> ComputeReport:
        if self._flops_per_sample is None:
            return ComputeReport(note=self._flops_note)
        return ComputeReport(self._flops_per_sample, self._flops_per_sample * throughput)

    def _system_report(self) -> SystemReport:
        start, end = self.recorder.window_start, self.recorder.window_end
        window = [r for t, r in self._gpu.samples if start <= t <= end]
        utilization = [r.utilization_percent for r in window if r.utilization_percent is not None]
        others = [r.other_processes for r in window if r.other_processes is not None]
        usage = self._cpu_usage
        return SystemReport(
            cpu_total_percent=usage.total_percent,
            cpu_per_core_percent=usage.per_core_percent,
            process_tree_cores=usage.tree_cores,
            gpu_utilization_percent=statistics.fmean(utilization) if utilization else None,
            gpu_note=self._nvml.reason or (None if utilization else "no NVML utilisation read inside the window"),
            gpu_other_processes=max(others) if others else None,
        )


def prepared_ahead(batches: Iterable[Any]) -> int:
    """How many batches a DataLoader's workers load ahead of the loop (workers x prefetch_factor); 0 for any other
    iterable, and for a DataLoader without workers, which loads each batch when asked."""
    if not isinstance(batches, DataLoader) or not batches.num_workers:
        return 0
    return batches.num_workers * (batches.prefetch_factor or 0)


def profile(name: str = "train", **options: Any) -> Profiler:
    """Measure your own training loop::

        with autotune.profile("train", device="cpu") as prof:
            for inputs, targets in prof.wrap(loader):
                loss = loss_fn(model(inputs), targets)
                loss.backward(); optimizer.step(); optimizer.zero_grad()
                prof.step()
        prof.result.save("profile.json")

    ``options`` are Profiler's: device, plan, memory_interval_s, compiling.
    """
    return Profiler(name, **options)
