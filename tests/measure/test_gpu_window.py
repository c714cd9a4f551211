"""A window measured on (fake) CUDA with a fake NVML: the limiting memory is the GPU's, and a process beside the run on
the GPU flags the measurement as disturbed."""

from __future__ import annotations

import os
import time

import torch

from autotune.measure.measurement import Measurement
from autotune.measure.profiler import Profiler
from autotune.measure.recorder import WindowPlan
from tests.measure.test_gpu import UUID, FakeNvml
from tests.measure.test_profiler import QUICK, FakeCuda, fake_cuda  # noqa: F401 (a fixture)

RESERVED = 700 * 2**20


def measure_on_cuda(fake_cuda: FakeCuda, monkeypatch, **nvml) -> Measurement:  # noqa: F811
    """A 0.1 s window on fake CUDA, NVML read every 10 ms."""
    FakeNvml(monkeypatch, [f"GPU-{UUID}"], **nvml)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda device=None: RESERVED)
    plan = WindowPlan(min_steps=10, min_time_s=0.1, max_time_s=10.0, warmup=QUICK)
    with Profiler(device="cuda", plan=plan, memory_interval_s=0.01) as prof:
        fake_cuda.profiler = prof
        for _ in prof.wrap(iter(lambda: torch.zeros(4, 2), None)):
            time.sleep(0.002)
            prof.step()
            if prof.done:
                break
    return prof.result


def test_on_cuda_the_limiting_memory_is_the_gpus_peak_reserved(fake_cuda, monkeypatch):  # noqa: F811
    memory = measure_on_cuda(fake_cuda, monkeypatch, pids=[os.getpid()]).memory
    assert memory.limiting == "gpu" and memory.limiting_peak_mb == 700.0 and memory.nvml_used_peak_mb == 512.0


def test_a_process_beside_the_run_on_its_gpu_disturbs_the_measurement(fake_cuda, monkeypatch):  # noqa: F811
    quiet = measure_on_cuda(fake_cuda, monkeypatch, pids=[os.getpid()]).system
    assert quiet.gpu_other_processes == 0  # the CPU may be busy here: not asserted
    shared = measure_on_cuda(fake_cuda, monkeypatch, pids=[os.getpid(), os.getppid()]).system
    assert shared.gpu_other_processes == 1 and shared.disturbed


def test_a_gpu_without_utilisation_figures_is_measured_without_them(fake_cuda, monkeypatch):  # noqa: F811
    """A MIG instance: NVML gives its memory but not its utilisation."""
    measurement = measure_on_cuda(fake_cuda, monkeypatch, pids=[os.getpid()], utilization=None)
    assert measurement.system.gpu_utilization_percent is None and measurement.memory.nvml_used_peak_mb == 512.0
