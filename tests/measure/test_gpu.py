"""GPU readings degrade cleanly without a GPU; with one, they report (skipped here with a reason)."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.gpu import Nvml, cuda_peaks_mb, reset_cuda_peaks, synchronize

CPU = torch.device("cpu")
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_cuda_calls_are_no_ops_on_a_cpu_device():
    synchronize(CPU)
    reset_cuda_peaks(CPU)
    assert cuda_peaks_mb(CPU) == (None, None)


def test_a_cpu_pipeline_never_reads_nvml_even_beside_a_gpu():
    nvml = Nvml(CPU)
    assert not nvml.available and nvml.read() is None
    assert nvml.reason == "NVML not read: the pipeline runs on cpu"
    nvml.close()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-driver path")
def test_nvml_without_a_driver_reports_why_and_never_raises():
    nvml = Nvml(torch.device("cuda"))
    assert not nvml.available
    assert nvml.reason.startswith("NVML unavailable")
    assert nvml.read() is None
    nvml.close()


@needs_gpu
def test_cuda_peaks_and_nvml_on_a_gpu():
    device = torch.device("cuda")
    reset_cuda_peaks(device)
    block = torch.empty(64 * 2**20, dtype=torch.uint8, device=device)
    synchronize(device)
    allocated, reserved = cuda_peaks_mb(device)
    assert allocated >= 64 and reserved >= allocated
    nvml = Nvml(device)
    assert nvml.available and nvml.read().memory_used_mb >= 64
    nvml.close()
    del block


@needs_gpu
def test_profile_on_a_gpu_synchronises_and_reports_gpu_memory():
    import autotune
    from autotune.measure.recorder import WindowPlan
    from autotune.measure.warmup import WarmupPolicy

    model = torch.nn.Linear(256, 256).cuda()
    with autotune.profile(device="cuda", plan=WindowPlan.unbounded(WarmupPolicy(min_steps=2, max_steps=4))) as prof:
        for x in prof.wrap(torch.randn(64, 32, 256).unbind(0)):
            x = x.cuda()
            prof.transferred()
            model(x).sum().backward()
            prof.step()
    assert prof.result.memory.cuda_peak_allocated_mb > 0
    assert prof.result.timing.transfer_s > 0
