"""GPU readings that degrade cleanly without a GPU: CUDA memory statistics and NVML."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml
import torch

from autotune.measure.memory import MIB
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
    utilization_percent: float
    memory_used_mb: float


class Nvml:
    """NVML for a CUDA device, or, off CUDA or without a driver or device, ``available`` False and the reason why.

    A CPU pipeline never reads NVML: a GPU beside it (used by others, or idle) says nothing about its run.
    """

    def __init__(self, device: torch.device) -> None:
        self.reason: str | None = None
        self._handle = None
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
        if self._handle is None:
            return None
        try:
            rates = pynvml.nvmlDeviceGetUtilizationRates(self._handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(self._handle)
        except pynvml.NVMLError:
            return None
        return GpuReading(float(rates.gpu), memory.used / MIB)

    def close(self) -> None:
        if self._handle is not None:
            self._handle = None
            pynvml.nvmlShutdown()


def _nvml_handle(device: torch.device):
    """NVML's handle for a CUDA device, found by UUID: NVML numbers all GPUs, CUDA only the visible ones."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")


@dataclass
class _SampledStep:
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

    A step is sampled when ``spacing_s`` of host time has passed since the last sampled one began (four event
    records, a few microseconds): every step of a slow loop, a steady share of a fast one.
    """

    spacing_s: float = 0.002
    steps: list[_SampledStep] = field(default_factory=list)
    _current: _SampledStep | None = None
    _last_sampled: float = float("-inf")

    def start(self, now: float) -> None:
        """The window starts at host time ``now``: its first step is sampled."""
        self._current = _SampledStep(previous_end=_record())
        self._last_sampled = now

    def batch_ready(self) -> None:
        if self._current is not None:
            self._current.ready = _record()

    def batch_transferred(self) -> None:
        if self._current is not None:
            self._current.transferred = _record()

    def step_done(self, samples: int, now: float) -> None:
        """The end of a step of ``samples`` samples at host time ``now``; maybe the start of a sampled one."""
        end = None
        if self._current is not None:
            end = self._current.end = _record()
            self._current.samples = samples
            self.steps.append(self._current)
            self._current = None
        if now - self._last_sampled >= self.spacing_s:
            self._current = _SampledStep(previous_end=end or _record())
            self._last_sampled = now

    def split(self) -> StepSplit | None:
        """The sampled steps' wait, transfer and compute times; call after synchronising. None without any."""
        waits, transfers, computes, samples = [], [], [], []
        for step in self.steps:
            ready = step.ready or step.previous_end
            transferred = step.transferred or ready
            waits.append(step.previous_end.elapsed_time(ready) / 1000)
            transfers.append(ready.elapsed_time(transferred) / 1000)
            computes.append(transferred.elapsed_time(step.end) / 1000)
            samples.append(step.samples)
        return StepSplit(waits, transfers, computes, samples) if samples else None


def _record():
    event = torch.cuda.Event(enable_timing=True)
    event.record()
    return event
