"""The differential probe in-process on the tiny pipeline, and its timers."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.differential import loader_throughput, step_throughput
from autotune.pipeline.build import build_pipeline
from autotune.trial.probe import ProbePlan, run_probe
from tests.conftest import NEUTRAL_KNOBS, trial_request


def test_run_probe_times_every_setting_in_plan_order():
    pipeline = build_pipeline(trial_request().pipeline)
    computes = [{**NEUTRAL_KNOBS, "batch_size": 8}, {**NEUTRAL_KNOBS, "batch_size": 8, "channels_last": True}]
    plan = ProbePlan([{"batch_size": 8, "num_workers": 0}, {"batch_size": 16, "num_workers": 1}], computes, 0.05)
    result = run_probe(pipeline, plan, torch.device("cpu"), None)
    assert len(result.loader_throughputs) == 2 and len(result.compute_throughputs) == 2
    assert all(rate > 0 for rate in result.loader_throughputs + result.compute_throughputs)
    assert torch.get_num_threads() >= 1


class FakeClock:
    def __init__(self, tick: float) -> None:
        self.now, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def test_loader_throughput_counts_samples_after_the_first_batch():
    batches = [torch.zeros(4, 1)] * 100
    # each clock read advances 0.1 s: one read at the start and one per batch after the first
    assert loader_throughput(batches, 0.5, FakeClock(0.1)) == pytest.approx(4 / 0.1)


def test_loader_throughput_refuses_a_loader_with_one_batch():
    with pytest.raises(ValueError, match="fewer than two batches"):
        loader_throughput([torch.zeros(4, 1)], 1.0)


def test_step_throughput_times_steps_after_warm_up():
    now, steps = [0.0], []

    def step():  # 0.1 s a step
        now[0] += 0.1
        steps.append(1)

    rate = step_throughput(step, 8, torch.device("cpu"), 0.3, warmup_steps=2, clock=lambda: now[0])
    assert rate == pytest.approx(8 / 0.1) and len(steps) == 2 + 3
