"""The differential probe in-process on the tiny pipeline, and its timers."""

from __future__ import annotations

import json
import os
from collections import namedtuple
from dataclasses import replace

import pytest
import torch

from autotune.measure import system
from autotune.measure.differential import LoaderRate, loader_rate, step_throughput
from autotune.pipeline.build import build_pipeline
from autotune.trial import probe as probe_module
from autotune.trial.probe import release_memory, run_probe
from autotune.trial.result import ProbeFailure, ProbeOutOfMemory, ProbePlan, ProbeResult
from tests.conftest import NEUTRAL_KNOBS, trial_request
from tests.fixtures.faults import RaisingCNN, WithAVolumeCNN
from tests.fixtures.out_of_memory import CudaHogAbove, OutOfMemoryAbove


def test_run_probe_times_every_setting_in_plan_order():
    pipeline = build_pipeline(trial_request().pipeline)
    computes = [{**NEUTRAL_KNOBS, "batch_size": 8}, {**NEUTRAL_KNOBS, "batch_size": 8, "channels_last": True}]
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}, {"batch_size": 16, "num_workers": 1}], computes, 0.05)
    result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert all(rate > 0 for rate in result.loader_throughputs + result.compute_throughputs)
    assert len(result.loader_throughputs) == 2 and len(result.compute_throughputs) == 2
    with pytest.MonkeyPatch.context() as patch:  # each setting's figure tells which setting it is
        patch.setattr(
            probe_module, "_time_loader", lambda _, kind, s: LoaderRate(kind["batch_size"] + kind["num_workers"], 0.5)
        )
        patch.setattr(probe_module, "_time_compute", lambda _, knobs, *args: 100.0 + knobs["channels_last"])
        result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert result.loader_throughputs == [8, 17] and result.compute_throughputs == [100.0, 101.0]
    assert result.loader_cpu == [0.5, 0.5]
    assert result.anchor_again == 100.0, "the first model step setting, timed again last"
    timed = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(probe_module, "_time_compute", lambda _, knobs, *args: timed.append(knobs) or 100.0 + len(timed))
        result = run_probe(pipeline, replace(plan, anchor_before=[1]), torch.device("cpu"), None)
    assert timed == [computes[0], computes[0], computes[0], computes[1], computes[0]], "again before index 1"
    assert result.compute_throughputs == [102.0, 104.0] and result.anchor_repeats == [103.0]
    assert result.anchor_again == 105.0


@pytest.mark.parametrize(("factor", "skipped"), [(0.3, [3]), (0.4, [])])
def test_a_value_over_three_times_slower_at_the_anchors_batch_size_is_not_timed_at_the_others(factor, skipped):
    pipeline = build_pipeline(trial_request().pipeline)
    at = [{**NEUTRAL_KNOBS, "batch_size": size} for size in (8, 16)]
    computes = [*at, *({**k, "channels_last": True} for k in at)]
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}], computes, 0.05, anchor_before=[2])
    timed = []

    def rate(_, knobs, *args):
        timed.append(knobs)
        return 100.0 * (factor if knobs["channels_last"] else 1.0)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(probe_module, "_time_compute", rate)
        result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert result.skipped == skipped and (result.compute_throughputs[3] is None) == bool(skipped)
    assert (computes[3] in timed) != bool(skipped) and computes[2] in timed, "always timed at the anchor's batch size"
    assert ProbeResult.from_dict(result.to_dict()) == result


def test_the_probe_gives_back_the_thread_count_it_started_with_not_the_one_torch_was_imported_with():
    # A trial pinned to one core (study.cpu_sets) starts with one thread: its settings at num_threads=None run so.
    pipeline = build_pipeline(trial_request().pipeline)
    threads = [{**NEUTRAL_KNOBS, "batch_size": 8, "num_threads": 2}, {**NEUTRAL_KNOBS, "batch_size": 8}]
    started = torch.get_num_threads()
    torch.set_num_threads(1)
    seen = []
    try:
        plan = ProbePlan([{"batch_size": 8, "num_workers": 0}], threads, 0.02)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(probe_module, "step_throughput", lambda *a, **k: seen.append(torch.get_num_threads()) or 1.0)
            run_probe(pipeline, plan, torch.device("cpu"), None)
    finally:
        torch.set_num_threads(started)
    assert seen == [2, 2, 1, 2], "the untimed first, num_threads=2, the default it started with, the first again"


class FakeClock:
    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_a_batch_size_that_fills_one_batch_an_epoch_is_timed_like_the_others():
    pipeline = build_pipeline(trial_request().pipeline)  # TinyImages: 256 samples
    loaders = [{"batch_size": 8, "num_workers": 0}, {"batch_size": 256, "num_workers": 1}]
    plan = ProbePlan(loaders, [NEUTRAL_KNOBS], 0.05)
    result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert all(rate > 0 for rate in result.loader_throughputs) and not result.out_of_memory


def test_loader_rate_counts_samples_after_the_first_batch_and_the_cpu_they_took():
    batches = [torch.zeros(4, 1)] * 100
    # each clock read advances 0.1 s: one read at the start and one per batch after the first
    assert loader_rate(batches, 4, 0.5, FakeClock(0.1)).samples_per_s == pytest.approx(4 / 0.1)
    # 5 batches of 4 samples timed; the CPU clock read at the two ends: 0.4 CPU-seconds for 20 samples
    rate = loader_rate(batches, 4, 0.5, FakeClock(0.1), cpu_seconds=FakeClock(0.4))
    assert rate.cpu_s_per_sample == pytest.approx(0.4 / 20)
    assert loader_rate(batches, 4, 0.5, FakeClock(0.1)).cpu_s_per_sample is None
    # timed for 0.05 s (an epoch of 2 batches): the 10 ms tick cannot tell the CPU a sample took
    assert loader_rate(batches[:3], 4, 0.5, FakeClock(0.025), cpu_seconds=FakeClock(0.4)).cpu_s_per_sample is None


def test_loader_rate_times_a_loader_of_one_batch_an_epoch_over_its_next_epoch():
    # a dataset of 250 samples at batch 128 (drop_last): one batch an epoch, which must not end the probe
    # clock reads: the start, after the one timed batch, at the epoch's end: 4 samples in 0.2 s
    assert loader_rate([torch.zeros(4, 1)], 4, 1.0, FakeClock(0.1)).samples_per_s == pytest.approx(4 / 0.2)
    with pytest.raises(ValueError, match="yields no batch"):
        loader_rate([], 4, 1.0)


def test_the_probe_reads_the_cpu_a_sample_of_each_loader_setting_took_and_what_other_processes_used():
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}, {"batch_size": 8, "num_workers": 2}], [NEUTRAL_KNOBS], 0.25)
    result = run_probe(build_pipeline(trial_request().pipeline), plan, torch.device("cpu"), None)
    cores = len(os.sched_getaffinity(0))
    for setting, rate, cpu in zip(plan.loaders, result.loader_throughputs, result.loader_cpu, strict=True):
        # a process's CPU time is kept by the 10 ms tick: 0.04 cores' worth over a quarter of a second, each
        assert cpu is None or 0 < rate * cpu <= min(setting["num_workers"] + 1, cores) + 0.3
    assert 0 <= result.loader_others_cores <= cores


def test_other_processes_cores_are_the_machines_busy_time_less_this_process_trees(monkeypatch):
    readings = iter([(0.0, 10.0, 3.0), (2.0, 13.0, 4.0)])  # (clock, machine busy, tree CPU) at the two ends
    monkeypatch.setattr(system.OthersMeter, "_reading", lambda self: next(readings))
    assert system.OthersMeter().cores() == pytest.approx((3.0 - 1.0) / 2.0)


def test_the_cores_busy_time_is_every_processs_on_the_cores_this_one_may_run_on_waiting_for_io_left_out(monkeypatch):
    fields = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal", "guest", "guest_nice")
    times = namedtuple("scputimes", fields)
    # guest time is counted in user time already; idle and iowait are cores free to run on
    per_core = [times(1.0, 0.5, 2.0, 100.0, 7.0, 0.25, 0.25, 1.0, 0.5, 0.5), times(*[1000.0] * 10)]
    monkeypatch.setattr(system.psutil, "cpu_times", lambda percpu: per_core)
    monkeypatch.setattr(system.os, "sched_getaffinity", lambda pid: {0})
    assert system.busy_core_seconds() == pytest.approx(1.0 + 0.5 + 2.0 + 0.25 + 0.25 + 1.0)


def test_step_throughput_times_steps_after_warm_up():
    now, steps = [0.0], []

    def step():  # 0.1 s a step
        now[0] += 0.1
        steps.append(1)

    rate = step_throughput(step, 8, torch.device("cpu"), 0.3, warmup_steps=2, min_steps=3, clock=lambda: now[0])
    assert rate == pytest.approx(8 / 0.1) and len(steps) == 2 + 3


def test_under_gradient_accumulation_step_throughput_times_whole_optimizer_steps():
    # Micro-batches of 8 take 0.01 s; every 32nd also steps the optimizer, 0.3 s more: 8 x 32 / 0.62 samples/s. Timed
    # for 0.25 s after one warm-up step, 25 micro-batches without an optimizer step read 800 samples/s.
    now, steps = [0.0], []

    def step():
        steps.append(1)
        now[0] += 0.01 + (0.3 if len(steps) % 32 == 0 else 0.0)

    rate = step_throughput(
        step, 8, torch.device("cpu"), 0.25, warmup_steps=1, min_steps=2, clock=lambda: now[0], step_multiple=32
    )
    assert rate == pytest.approx(8 * 32 / 0.62) and len(steps) == 32 + 32, "one cycle to warm up, one timed"


def test_the_probe_times_a_micro_batch_over_whole_optimizer_steps(monkeypatch):
    pipeline = build_pipeline(trial_request().pipeline)
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}], [{**NEUTRAL_KNOBS, "batch_size": 8}], 0.01)
    optimizer_steps = []
    timed = probe_module.step_throughput

    def counted(step, *args, **kwargs):
        rate = timed(step, *args, **kwargs)
        optimizer_steps.append(step.func.__self__.optimizer_steps)
        return rate

    monkeypatch.setattr(probe_module, "step_throughput", counted)
    run_probe(pipeline, plan, torch.device("cpu"), 32)
    assert optimizer_steps and all(count >= 2 for count in optimizer_steps), "4 micro-batches a step: warm-up, timed"


needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def out_of_memory_plan() -> ProbePlan:
    """Loaders and model steps at batch 32, 64 and 128 (one thread, and channels-last, at 128 too)."""
    loaders = [{"batch_size": b, "num_workers": 0} for b in (32, 64, 128)]
    computes = [{**NEUTRAL_KNOBS, "batch_size": b} for b in (32, 64, 128)]
    computes += [{**NEUTRAL_KNOBS, "batch_size": 128, "num_threads": 1}, {**computes[2], "channels_last": True}]
    return ProbePlan(loaders, computes, 0.05)


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ("cuda", "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
        ("cublas", "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    ],
)
def test_a_setting_that_runs_out_of_memory_is_recorded_as_such_and_the_rest_of_the_probe_is_kept(error, message):
    pipeline = replace(build_pipeline(trial_request(length=512).pipeline), model=OutOfMemoryAbove(64, error))
    threads = torch.get_num_threads()
    result = run_probe(pipeline, out_of_memory_plan(), torch.device("cpu"), None)
    assert all(rate > 0 for rate in result.loader_throughputs), "loading alone never runs the model"
    assert all(rate > 0 for rate in result.compute_throughputs[:2]) and result.compute_throughputs[2:] == [None] * 3
    assert result.out_of_memory == [ProbeOutOfMemory("compute", index, message) for index in (2, 3, 4)]
    assert ProbeResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result, "stored as typed data"
    assert torch.get_num_threads() == threads, "a step that ran out of memory (with one thread) leaves no setting"


def test_a_setting_that_raises_is_recorded_and_the_rest_of_the_probe_is_kept():
    pipeline = replace(build_pipeline(trial_request().pipeline), model=WithAVolumeCNN())
    result = run_probe(pipeline, out_of_memory_plan(), torch.device("cpu"), None)
    assert all(rate > 0 for rate in result.compute_throughputs[:4]) and result.compute_throughputs[4] is None
    assert result.failed == [
        ProbeFailure("compute", 4, "RuntimeError: required rank 4 tensor to use channels_last format")
    ]
    assert result.out_of_memory == []
    assert ProbeResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result, "stored as typed data"


def test_a_model_step_that_raises_at_every_setting_is_recorded_at_each():
    pipeline = replace(build_pipeline(trial_request().pipeline), model=RaisingCNN())
    result = run_probe(pipeline, out_of_memory_plan(), torch.device("cpu"), None)
    assert result.compute_throughputs == [None] * 5 and len(result.failed) == 5


def test_after_an_out_of_memory_on_a_gpu_the_caching_allocator_gives_its_blocks_back(monkeypatch):
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(True))
    release_memory(torch.device("cpu"))
    assert not emptied, "nothing to give back on a CPU"
    release_memory(torch.device("cuda"))
    assert emptied == [True]


@needs_gpu
def test_a_real_cuda_out_of_memory_in_the_probe_is_recorded_and_the_other_settings_run_on_the_gpu():
    pipeline = replace(build_pipeline(trial_request(length=512).pipeline), model=CudaHogAbove(64))
    result = run_probe(pipeline, out_of_memory_plan(), torch.device("cuda"), None)
    assert all(rate > 0 for rate in result.compute_throughputs[:2]) and result.compute_throughputs[2:] == [None] * 3
    assert [entry.index for entry in result.out_of_memory] == [2, 3, 4]
    assert all("CUDA out of memory" in entry.message for entry in result.out_of_memory)
