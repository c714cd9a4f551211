"""One real trial subprocess per fault (tests/fixtures/faults.py): each is reported with its kind and cause."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from packaging.version import Version

from autotune.trial.result import FailureKind, TrialRequest, TrialResult
from autotune.trial.runner import run_trial
from tests.conftest import processes_mentioning, trial_request

TIMEOUT_S = 120
COMPILE_TIMEOUT_S = 300  # a first torch.compile on this machine can take ~30 s
request = trial_request


def run(req: TrialRequest, workdir: Path, name: str, timeout_s: float = TIMEOUT_S) -> TrialResult:
    """Run the trial, check it failed and left no process behind, and return its result."""
    result = run_trial(req, timeout_s, workdir, name)
    assert not result.ok and result.measurement is None
    assert processes_mentioning(str(workdir / f"{name}.log")) == [], "no process of the trial survives"
    return result


@pytest.fixture(scope="module")
def segfault(tmp_path_factory) -> tuple[TrialResult, Path]:
    workdir = tmp_path_factory.mktemp("segfault")
    return run(request(model="faults.SegfaultingCNN"), workdir, "segv"), workdir / "segv.log"


@pytest.fixture(scope="module")
def worker_killed(tmp_path_factory) -> TrialResult:
    workdir = tmp_path_factory.mktemp("worker_killed")
    return run(request(dataset="faults.WorkerKillingImages", num_workers=1), workdir, "wkill")


@pytest.fixture(scope="module")
def worker_bus_error(tmp_path_factory) -> TrialResult:
    workdir = tmp_path_factory.mktemp("worker_bus_error")
    return run(request(dataset="shared_memory.SharedMemoryFullImages", num_workers=1), workdir, "wbus")


def test_a_segfault_is_reported_as_sigsegv(segfault):
    result, _ = segfault
    assert result.failure.kind is FailureKind.SIGNAL
    assert "killed by SIGSEGV" in result.failure.message


def test_a_segfault_leaves_the_crashing_python_stack_in_the_log(segfault):
    result, log_path = segfault
    log = log_path.read_text()
    assert "Segmentation fault" in log
    assert "faults.py" in log and "in forward" in log, "the crashing frame is named"
    assert "Extension modules" not in result.failure.message, "the one-line reason stays readable"


def test_a_dataloader_worker_killed_by_sigkill_is_reported_like_a_killed_trial(worker_killed):
    assert worker_killed.failure.kind is FailureKind.OUT_OF_MEMORY
    assert worker_killed.failure.message == (
        "a DataLoader worker was killed by SIGKILL, most likely by the kernel's out-of-memory killer"
    )


def test_a_dataloader_worker_killed_by_sigbus_is_typed_by_the_trials_torch(worker_bus_error):
    # Out of memory where that torch lets a full /dev/shm kill a worker (before 2.10), else a fault: this process's
    # torch is the trial's, its release read here by packaging, not by the rule under test (test_exceptions.py: both).
    installed = Version(torch.__version__)
    if installed.release[:2] >= (2, 10) and not installed.is_prerelease:
        kind, cause = FailureKind.SIGNAL, "most likely a memory-mapped file the dataset reads became shorter than"
    else:
        kind, cause = FailureKind.OUT_OF_MEMORY, "most likely as shared memory (/dev/shm), where workers hand over"
    assert worker_bus_error.failure.kind is kind
    assert worker_bus_error.failure.message.startswith(f"a DataLoader worker was killed by SIGBUS, {cause}")


@pytest.mark.slow
def test_a_dataset_error_in_the_main_process_is_an_exception(tmp_path):
    # 16 samples and batch size 16: the first batch loads every sample, the corrupt one included.
    result = run(request(dataset="faults.CorruptSampleImages", length=16), tmp_path, "corrupt")
    assert result.failure.kind is FailureKind.EXCEPTION
    assert result.failure.message == "ValueError: sample 5 is corrupt"
    assert "Traceback" in (tmp_path / "corrupt.log").read_text()


def test_an_error_in_the_models_forward_is_an_exception(tmp_path):
    result = run(request(model="faults.RaisingCNN"), tmp_path, "forward")
    assert result.failure.kind is FailureKind.EXCEPTION
    assert result.failure.message == "ValueError: this model cannot run forward"


def test_an_error_in_the_loss_is_an_exception(tmp_path):
    loss = {"_target_": "tests.fixtures.faults.ClassCountLoss", "num_classes": 10}
    result = run(request(loss=loss), tmp_path, "loss")
    assert result.failure.kind is FailureKind.EXCEPTION
    assert result.failure.message == "ValueError: loss expects output [N, 10], got [16, 4]"


def test_an_output_the_loss_rejects_is_an_exception(tmp_path):
    result = run(request(model="faults.WrongShapeCNN"), tmp_path, "shape")
    assert result.failure.kind is FailureKind.EXCEPTION
    assert result.failure.message == "RuntimeError: Expected target size [16, 7], got [16]"


@pytest.mark.slow
def test_a_model_that_fails_only_when_compiled_is_an_exception(tmp_path):
    assert run_trial(request(model="faults.CompileRefusingCNN"), TIMEOUT_S, tmp_path, "eager").ok, "eager is fine"
    result = run(request(model="faults.CompileRefusingCNN", compile="default"), tmp_path, "compiled", COMPILE_TIMEOUT_S)
    assert result.failure.kind is FailureKind.EXCEPTION
    assert result.failure.message.startswith("TorchRuntimeError: ")
    assert "this model refuses to be compiled" in result.failure.message


def test_a_cuda_out_of_memory_error_is_out_of_memory_even_on_cpu(tmp_path):
    assert torch.OutOfMemoryError is torch.cuda.OutOfMemoryError
    result = run(request(model="faults.CudaOomCNN"), tmp_path, "oom")
    assert result.failure.kind is FailureKind.OUT_OF_MEMORY
    assert result.failure.message == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_real_cuda_out_of_memory_is_out_of_memory(tmp_path):
    req = replace(request(model="faults.CudaHogCNN"), device="cuda")
    result = run(req, tmp_path, "cuda-oom")
    assert result.failure.kind is FailureKind.OUT_OF_MEMORY
    assert "CUDA out of memory" in result.failure.message
