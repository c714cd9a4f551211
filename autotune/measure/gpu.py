"""GPU readings that degrade cleanly without a GPU: CUDA memory statistics and NVML."""

from __future__ import annotations

from dataclasses import dataclass

import pynvml
import torch

from autotune.measure.memory import MIB


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
    """NVML for one device, or, where there is no driver or device, ``available`` False and the reason why."""

    def __init__(self, device_index: int = 0) -> None:
        self.reason: str | None = None
        self._handle = None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            self.reason = f"NVML unavailable: {exc}"
            return
        try:
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        except pynvml.NVMLError as exc:
            self.reason = f"NVML has no device {device_index}: {exc}"
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
