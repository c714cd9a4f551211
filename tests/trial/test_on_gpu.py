"""Issue 26's GPU paths on a real GPU: the facts read in a subprocess, bf16 native only, cuda:N, the warm-up's minimum
time, fp16's skipped steps and CUDA graphs beside set_to_none. Each test skips with its reason where CUDA is absent;
the same paths are tested on the CPU with CUDA faked in test_inspect.py, test_warmup_min_time.py,
test_loss_scaler.py and test_cuda_graphs.py."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest
import torch

from autotune.pipeline.inspect import read_facts
from autotune.trial.result import FailureKind
from autotune.trial.runner import run_trial
from tests.conftest import REPO, trial_request

needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

_TUNER = """
import sys, tempfile
from pathlib import Path
import torch
from autotune.runner import inspect_run
from autotune.config.load import load_settings
from tests.conftest import tiny_config
settings = load_settings(tiny_config(measure={"device": "cuda"}), "tiny")
facts = inspect_run(settings, Path(tempfile.mkdtemp()))
print(facts.device, facts.machine["gpu_bf16"], torch.cuda.is_initialized())
"""


@needs_gpu
def test_the_tuner_reads_the_gpus_facts_without_initialising_cuda_itself():
    proc = subprocess.run(
        [sys.executable, "-c", _TUNER], cwd=REPO, capture_output=True, text=True, timeout=300, check=True
    )
    device, bf16, initialised = proc.stdout.split()
    native = torch.cuda.get_device_capability(0) >= (8, 0)
    assert (device, bf16, initialised) == ("cuda", str(native), "False")


@needs_gpu
def test_the_facts_name_every_visible_gpu_and_bf16_natively():
    facts = read_facts(trial_request().pipeline, f"cuda:{torch.cuda.device_count() - 1}")
    assert len(facts.devices.cuda) == torch.cuda.device_count()
    assert facts.machine["gpu_bf16"] == (torch.cuda.get_device_capability(torch.cuda.device_count() - 1) >= (8, 0))


@needs_gpu
def test_a_trial_on_the_last_visible_gpu_runs_there_after_a_warm_up_of_at_least_a_second(tmp_path):
    device = f"cuda:{torch.cuda.device_count() - 1}"
    result = run_trial(replace(trial_request(), device=device), 300, tmp_path, "last-gpu")
    assert result.ok, result.failure
    assert result.measurement.device == device
    assert result.timing.warmup_s >= 1.0, "millisecond steps settle by count in well under 0.1 s"


@needs_gpu
def test_fp16_whose_scaler_skips_every_step_is_incorrect_on_a_gpu(tmp_path):
    overflowing = replace(trial_request(model="inspection.OverflowingCNN", amp="fp16"), device="cuda")
    result = run_trial(overflowing, 300, tmp_path, "overflow")
    assert result.failure.kind is FailureKind.INCORRECT and "loss scaler skipped" in result.failure.message
    training = run_trial(replace(trial_request(amp="fp16"), device="cuda"), 300, tmp_path, "fp16")
    assert training.ok, training.failure
    assert training.loss_check.skipped_steps <= training.loss_check.optimizer_steps // 2


@needs_gpu
@pytest.mark.timeout(600)  # compiling
def test_cuda_graphs_with_gradients_freed_between_steps_train(tmp_path):
    request = replace(trial_request(compile="reduce-overhead", set_to_none=True), device="cuda")
    result = run_trial(request, 600, tmp_path, "graphs")
    assert result.ok, result.failure
