"""The plain loop that judges the harness: one DataLoader across epochs, a fixed warm-up, a window as the plan says."""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.pipeline.build import build_pipeline
from autotune.trial.plain import run_plain
from autotune.trial.worker import run_request
from tests.conftest import NEUTRAL_KNOBS, trial_request

PLAN = WindowPlan(min_steps=12, min_time_s=0.1, max_time_s=10.0, warmup=WarmupPolicy(min_steps=3))


def test_the_plain_loop_times_whole_epochs_where_one_is_shorter_than_its_window():
    # A loader that stalls at epoch boundaries then counts its stalls as a long run does, wherever warm-up ended.
    request = trial_request(length=64)  # 4 steps an epoch at batch 16, milliseconds each
    pipeline = build_pipeline(request.pipeline)
    run_plain(pipeline, request.knobs, torch.device("cpu"), PLAN, None)  # a process's first steps take seconds
    run = run_plain(pipeline, request.knobs, torch.device("cpu"), PLAN, None)
    assert run.warmup_steps == 4, "3 steps of warm-up, then the rest of the epoch"
    assert run.steps >= 12 and run.steps % 4 == 0 and run.window_s >= 0.1
    assert run.samples == 16 * run.steps and run.throughput == run.samples / run.window_s
    assert run.epoch_boundaries == run.steps // 4, "the first epoch's start is in the window too"


def test_the_plain_loop_times_its_window_from_its_warm_ups_end_where_an_epoch_is_too_long_to_time_whole():
    # 1000 steps an epoch (10 s at 10 ms a step, seconds on any machine), over half of the longest window, which leaves
    # room for min_steps' 12 steps on a loaded one (the cap, not the window's rule, would end them there).
    request = trial_request(length=16000)
    plan = replace(PLAN, max_time_s=2.0)
    run = run_plain(build_pipeline(request.pipeline), request.knobs, torch.device("cpu"), plan, None)
    assert run.warmup_steps == 3 and run.steps >= 12 and run.epoch_boundaries == 0


def test_the_plain_loop_applies_the_knobs_and_accumulates_micro_batches():
    request = trial_request(length=64)
    knobs = {**NEUTRAL_KNOBS, "batch_size": 8, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}
    pipeline, steps = _counting_steps(request)
    run = run_plain(pipeline, knobs, torch.device("cpu"), PLAN, effective_batch_size=16)
    assert run.samples == 8 * run.steps
    assert len(steps) == (run.warmup_steps + run.steps) // 2, "one optimizer step per two micro-batches"
    odd = replace(PLAN, min_steps=13, warmup=WarmupPolicy(min_steps=1))
    run = run_plain(pipeline, knobs, torch.device("cpu"), odd, effective_batch_size=32)
    assert run.steps % 4 == 0, "the window holds whole optimizer steps, whichever micro-batch it starts at"


def test_the_plain_loop_warms_up_for_the_warm_up_policys_minimum_time_too():
    """As the harness does (on CUDA for a second by default, while the GPU's clocks ramp up)."""
    request = trial_request(length=64)
    pipeline, steps = _counting_steps(request)
    run_plain(pipeline, request.knobs, torch.device("cpu"), PLAN, None)  # a process's first steps take seconds
    steps.clear()
    plan = replace(PLAN, warmup=WarmupPolicy(min_steps=3, min_time_s=0.3))
    called = time.perf_counter()
    run = run_plain(pipeline, request.knobs, torch.device("cpu"), plan, None)
    assert run.warmup_steps > 3, "3 steps take a few milliseconds: the minimum time held the warm-up"
    # The step that crossed the minimum time began before it; the first timed step begins after the window did.
    assert steps[run.warmup_steps] - called >= 0.3


def _counting_steps(request):
    """The request's pipeline, whose optimizer appends the clock's time to the list returned beside it at each step."""
    pipeline, steps = build_pipeline(request.pipeline), []
    make_optimizer = pipeline.optimizer_factory

    def counting(params, **options):
        optimizer = make_optimizer(params, **options)
        original = optimizer.step
        optimizer.step = lambda *a, **k: steps.append(time.perf_counter()) or original(*a, **k)
        return optimizer

    pipeline.optimizer_factory = counting
    return pipeline, steps


def test_a_plain_request_runs_the_plain_loop_in_the_trial_worker():
    request = trial_request(length=64)
    result = run_request(replace(request, plain=True, plan=PLAN))
    assert result.ok and result.measurement is None and result.plain.steps >= 12
    assert type(result).from_dict(result.to_dict()) == result


def test_the_harness_times_whole_optimizer_steps_where_micro_batches_accumulate():
    request = trial_request(length=64)
    result = run_request(replace(request, plan=replace(PLAN, min_steps=13), effective_batch_size=64))  # 4 a step
    assert result.ok, result.failure
    assert result.timing.steps % 4 == 0 and result.timing.steps >= 13
