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
