"""The public profiling API around a real (small) training loop, in this process."""

from __future__ import annotations

import json
import warnings
from functools import partial

import pytest
import torch

import autotune
from autotune.errors import AutotuneError
from autotune.measure.measurement import Measurement
from autotune.measure.profiler import batch_len
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from tests.pipelines.tiny import TinyCNN, TinyImages

QUICK = WarmupPolicy(min_steps=2, max_steps=4)


def train(prof, steps=30, count_flops=True):
    model, loss_fn = TinyCNN(), torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(TinyImages(512), batch_size=16)

    def step(inputs, targets):
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    for index, (inputs, targets) in enumerate(prof.wrap(loader)):
        if index == 0 and count_flops:
            prof.count_flops(partial(step, inputs, targets), samples=len(inputs))
        step(inputs, targets)
        prof.step()
        if index + 1 == steps or prof.done:
            break


def test_profile_measures_a_users_loop_and_saves_json(tmp_path):
    with autotune.profile("train", plan=WindowPlan.unbounded(QUICK), memory_interval_s=0.05) as prof:
        train(prof)
    result = prof.result
    assert result.name == "train" and result.device == "cpu"
    assert result.timing.warmup_steps + result.timing.steps == 30
    assert result.timing.samples == 16 * result.timing.steps
    assert result.timing.throughput == pytest.approx(result.timing.samples / result.timing.window_s)
    assert result.memory.metric in ("pss", "rss") and result.memory.peak_mb > 50
    assert result.memory.window_start_mb > 0 and result.memory.window_end_mb > 0
    assert result.compute.flops_per_sample > 0
    assert result.compute.achieved_flops_per_s == pytest.approx(
        result.compute.flops_per_sample * result.timing.throughput
    )
    assert len(result.system.cpu_per_core_percent) >= 1 and result.system.process_tree_cores >= 0
    assert result.system.gpu_utilization_percent is None and "NVML" in result.system.gpu_note
    assert result.environment["cpu_count"] >= 1

    path = result.save(tmp_path / "profile.json")
    assert set(json.loads(path.read_text())) == {
        "name",
        "device",
        "timing",
        "memory",
        "compute",
        "system",
        "environment",
    }
    assert Measurement.load(path) == result


def test_a_bounded_plan_says_when_the_window_is_done():
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)
    with autotune.profile(plan=plan) as prof:
        train(prof, steps=1000, count_flops=False)
    assert prof.done and prof.result.timing.steps == 5
    assert prof.result.compute.flops_per_sample is None and "not counted" in prof.result.compute.note


def test_a_loop_that_ends_before_a_bounded_window_is_complete_warns():
    plan = WindowPlan(min_steps=50, min_time_s=0.0, max_time_s=60.0, warmup=QUICK)
    with pytest.warns(UserWarning, match=r"ended before the timed window was complete \(\d+ of 50 steps"):
        with autotune.profile(plan=plan) as prof:
            train(prof, steps=20, count_flops=False)
    assert not prof.done and 0 < prof.result.timing.steps < 50


def test_an_unbounded_window_ends_with_the_loop_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with autotune.profile(plan=WindowPlan.unbounded(QUICK)) as prof:
            train(prof, steps=20, count_flops=False)
    assert prof.result.timing.steps > 0
    assert WindowPlan.unbounded().bounded is False and WindowPlan().bounded is True


def test_a_loop_too_short_to_warm_up_is_an_error():
    with pytest.raises(AutotuneError, match="ended during warm-up"):
        with autotune.profile(plan=WindowPlan.unbounded(WarmupPolicy(min_steps=8))) as prof:
            train(prof, steps=3)


def test_an_exception_in_the_loop_propagates_without_a_result():
    with pytest.raises(ZeroDivisionError):
        with autotune.profile() as prof:
            raise ZeroDivisionError
    assert prof.result is None


def test_batch_len():
    assert batch_len(torch.zeros(5, 3)) == 5
    assert batch_len((torch.zeros(4, 3), torch.zeros(4))) == 4
    assert batch_len({"x": torch.zeros(6, 2)}) == 6
    with pytest.raises(AutotuneError, match="pass step"):
        batch_len("text")
