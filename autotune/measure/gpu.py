"""GPU readings that degrade cleanly without a GPU: CUDA memory statistics and NVML."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psutil
import pynvml
import torch

from autotune.measure.memory import MIB, tree_pids
from autotune.measure.recorder import StepSplit


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device``; nothing to wait for on a CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_cuda_peaks(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def cuda_peaks_mb(device: torch.device) -> tuple[float | None, float | None]:
    """Peak allocated and reserved CUDA memory since the last reset; (None, None) off CUDA."""
    if device.type != "cuda":
        return None, None
    return torch.cuda.max_memory_allocated(device) / MIB, torch.cuda.max_memory_reserved(device) / MIB


@dataclass(frozen=True)
class GpuReading:
    """One NVML reading of the device; a figure NVML would not give is None (a MIG instance has no utilisation).
    ``other_processes``: how many processes outside the measured tree were computing on it."""

    utilization_percent: float | None
    memory_used_mb: float | None
    other_processes: int | None = None


class Nvml:
    """NVML for a CUDA device, or, off CUDA or without a driver or device, ``available`` False and the reason why.

    A CPU pipeline never reads NVML: a GPU beside it (used by others, or idle) says nothing about its run. The
    measured process tree is ``root_pid`` (default: this process) and its descendants.
    """

    def __init__(self, device: torch.device, root_pid: int | None = None) -> None:
        self.reason: str | None = None
        self._handle = None
        self._root = root_pid or os.getpid()
        self._in_tree: dict[int, bool] = {self._root: True}
        if device.type != "cuda":
            self.reason = f"NVML not read: the pipeline runs on {device.type}"
            return
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML unavailable: {exc}"
            return
        try:
            self._handle = _nvml_handle(device)
        except (pynvml.NVMLError, RuntimeError, AssertionError) as exc:
            self.reason = f"NVML has no handle for {device}: {exc}"
            pynvml.nvmlShutdown()

    @property
    def available(self) -> bool:
        return self._handle is not None

    def read(self) -> GpuReading | None:
        """The device's utilisation, memory used and neighbours now; None off CUDA or where NVML gives none of them.

        Called on the sampler's thread at its cadence (``measure.memory_interval_s``), never on the training loop's.
        """
        if self._handle is None:
            return None
        reading = GpuReading(
            utilization_percent=_nvml_or_none(lambda: float(pynvml.nvmlDeviceGetUtilizationRates(self._handle).gpu)),
            memory_used_mb=_nvml_or_none(lambda: pynvml.nvmlDeviceGetMemoryInfo(self._handle).used / MIB),
            other_processes=_nvml_or_none(self._other_processes),
        )
        return None if reading == GpuReading(None, None, None) else reading

    def _other_processes(self) -> int:
        """Processes computing on the device that are certainly not in the measured tree.

        NVML lists host PIDs even inside a container with its own PID namespace (the driver knows no namespaces):
        where the tree's root is not among them, PIDs cannot be matched, and only the processes beyond the tree's
        count are certainly others' (a lower bound: the tree's DataLoader workers count as if they used the GPU).
        Each PID is placed once, by its ancestry; one that is gone by then is not counted.
        """
        on_gpu = {process.pid for process in pynvml.nvmlDeviceGetComputeRunningProcesses(self._handle)}
        if on_gpu <= {self._root}:
            return 0
        if self._root in on_gpu:
            return sum(1 for pid in on_gpu if not self._is_ours(pid))
        tree = tree_pids(self._root)
        return max(0, len(on_gpu) - len(tree)) if tree else 0  # a tree that is gone has no neighbours to count

    def _is_ours(self, pid: int) -> bool:
        """Whether ``pid`` is the measured tree's root or descends from it; True where that cannot be told."""
        if pid not in self._in_tree:
            try:
                self._in_tree[pid] = self._root in {parent.pid for parent in psutil.Process(pid).parents()}
            except psutil.Error:
                return True
        return self._in_tree[pid]

    def close(self) -> None:
        if self._handle is not None:
            self._handle = None
            pynvml.nvmlShutdown()


def _nvml_or_none(read: Callable[[], float | int]) -> float | int | None:
    """``read()``, or None where NVML refuses it (not supported on this device, no permission, a driver error)."""
    try:
        return read()
    except pynvml.NVMLError:
        return None


def _nvml_handle(device: torch.device):
    """NVML's handle for a CUDA device (a whole GPU or a MIG instance), found by UUID: NVML numbers all GPUs, CUDA
    only the visible ones. Raises RuntimeError where NVML knows none of the UUIDs it may go by."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    refused = []
    for uuid in _uuids(index):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError as exc:
            refused.append(f"{uuid}: {exc}")
    raise RuntimeError(f"NVML knows none of the UUIDs it may go by ({'; '.join(refused)})")


_UUID_CHARS = 36  # 8-4-4-4-12 hexadecimal digits and hyphens


def _uuids(index: int) -> list[str]:
    """The UUIDs NVML may know CUDA device ``index`` by, most specific first: its CUDA_VISIBLE_DEVICES entry where that
    is a whole UUID ("GPU-..." or "MIG-...": NVML needs it whole, CUDA also takes a prefix), then the UUID CUDA reports
    (bare, or with its "GPU-" prefix) as a GPU's and as a MIG instance's."""
    visible = [entry.strip() for entry in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    named = visible[index] if index < len(visible) else ""
    given = [named] if named.startswith(("GPU-", "MIG-")) and len(named) >= _UUID_CHARS + 4 else []
    bare = str(torch.cuda.get_device_properties(index).uuid).removeprefix("GPU-")
    return list(dict.fromkeys([*given, f"GPU-{bare}", f"MIG-{bare}"]))


@dataclass
class _SampledStep:
    index: int  # its place among the window's steps
    previous_end: Any
    ready: Any = None
    transferred: Any = None
    end: Any = None
    samples: int = 0


@dataclass
class DeviceTimeline:
    """CUDA events around a sample of a timed window's steps, read once the window is over: how long the device
    sat idle before each sampled step's batch arrived, copied it in, and computed. Nothing here waits for the
    device, so the host runs ahead and overlaps loading the next batch with the device's work, as a training
    loop does.

    Each step is sampled at random, with the probability that samples one step per ``spacing_s`` of the warm-up's
    settled step time (``start``): every step of a loop of slow steps, about 50 steps a second of a fast one (more
    where the window's steps, which do not wait for the device, run faster than the warm-up's, which do), so that
    the events (four a sampled step, created and recorded by the host) cost a small share of any window, and a 4 s
    window still samples about 200 steps. At random, neither by the clock nor by a fixed stride: either locks
    onto a loop whose steps repeat a pattern (with gradient accumulation, a longer optimizer step every k steps)
    and times one phase of it. The draws come from a generator of its own (``seed``), not the loop's. The events go
    on ``device``'s current stream (None: the current device's), where the loop's work is queued, whichever device
    is current.
    """

    device: torch.device | None = None
    spacing_s: float = 0.02
    seed: int = 0
    steps: list[_SampledStep] = field(default_factory=list)
    _current: _SampledStep | None = None
    _seen: int = 0
    _probability: float = 1.0
    _draws: random.Random = field(default_factory=random.Random)

    def start(self, step_s: float) -> None:
        """The window starts after warm-up steps of ``step_s`` each: its first step is sampled."""
        self._probability = 1.0 if step_s >= self.spacing_s else step_s / self.spacing_s
        self._draws.seed(self.seed)
        self._seen = 0
        self._current = _SampledStep(0, previous_end=self._record())

    def batch_ready(self) -> None:
        if self._current is not None:
            self._current.ready = self._record()

    def batch_transferred(self) -> None:
        if self._current is not None:
            self._current.transferred = self._record()

    def step_done(self, samples: int) -> None:
        """The end of a step of ``samples`` samples; maybe the start of a sampled one."""
        end = None
        if self._current is not None:
            end = self._current.end = self._record()
            self._current.samples = samples
            self.steps.append(self._current)
            self._current = None
        self._seen += 1
        if self._draws.random() < self._probability:
            self._current = _SampledStep(self._seen, previous_end=end or self._record())

    def _record(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def split(self) -> StepSplit | None:
        """The sampled steps' wait, transfer and compute times, and their places among the window's steps; call
        after synchronising. None without any."""
        waits, transfers, computes, samples = [], [], [], []
        for step in self.steps:
            ready = step.ready or step.previous_end
            transferred = step.transferred or ready
            waits.append(step.previous_end.elapsed_time(ready) / 1000)
            transfers.append(ready.elapsed_time(transferred) / 1000)
            computes.append(transferred.elapsed_time(step.end) / 1000)
            samples.append(step.samples)
        return StepSplit(waits, transfers, computes, samples, [step.index for step in self.steps]) if samples else None
