"""A minimum warm-up time: on CUDA, millisecond steps settle by step count in well under 0.1 s, before the GPU's
clocks have ramped up. Fake step times and a fake clock; the CUDA profiler with torch.cuda's calls faked."""

from __future__ import annotations

import pytest

from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.measure.profiler import Profiler
from autotune.measure.recorder import WINDOW, StepRecorder, WindowPlan
from autotune.measure.warmup import CUDA_WARMUP_MIN_TIME_S, WarmupPolicy
from tests.conftest import tiny_config
from tests.measure.test_profiler import fake_cuda  # noqa: F401  (a fixture)

MILLISECOND_STEPS = [0.001] * 2000  # steady from the first: the step-count rules alone end warm-up at step 8


def test_on_cuda_the_default_minimum_is_one_second_and_on_a_cpu_none():
    assert WarmupPolicy().on("cuda").min_time_s == CUDA_WARMUP_MIN_TIME_S == 1.0
    assert WarmupPolicy().on("cpu").min_time_s == 0.0
    assert WarmupPolicy(min_time_s=0.25).on("cuda").min_time_s == 0.25, "a setting is kept"


def test_settled_millisecond_steps_do_not_end_warm_up_before_the_minimum_time():
    policy = WarmupPolicy().on("cuda")
    assert WarmupPolicy().on("cpu").is_stable(MILLISECOND_STEPS[:8]), "by step count, settled after 8 ms"
    assert not policy.is_stable(MILLISECOND_STEPS[:999])
    assert policy.is_stable(MILLISECOND_STEPS[:1000])


def test_the_step_cap_waits_for_the_minimum_time_too():
    policy = WarmupPolicy(max_steps=60).on("cuda")
    assert not policy.gives_up(MILLISECOND_STEPS[:60]), "60 steps are 0.06 s"
    assert policy.gives_up(MILLISECOND_STEPS[:1000])
    assert WarmupPolicy(max_steps=60).on("cpu").gives_up(MILLISECOND_STEPS[:60])


def test_the_recorder_starts_the_window_after_the_minimum_time_on_a_fake_clock():
    now = [0.0]
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=60.0, warmup=WarmupPolicy().on("cuda"))
    recorder = StepRecorder(plan, clock=lambda: now[0])
    recorder.start()
    steps = 0
    while recorder.phase != WINDOW:
        now[0] += 0.001
        recorder.step_done(8)
        steps += 1
    assert steps == 1000 and recorder.window_start == pytest.approx(1.0)


def test_the_profiler_takes_the_minimum_of_its_device(fake_cuda):  # noqa: F811
    assert Profiler(device="cpu").plan.warmup.min_time_s == 0.0
    assert Profiler(device="cuda").plan.warmup.min_time_s == 1.0
    prof = fake_cuda.loop(10, 0.0, 0.001)  # millisecond steps on a faked GPU
    timing = prof.result.timing
    assert timing.warmup_s >= 1.0 and timing.warmup_steps > 100
    assert prof.plan.warmup.min_time_s == 1.0, "the plan the measurement records says what was used"


def test_the_setting_is_null_by_default_and_a_number_of_seconds_otherwise():
    assert load_settings(tiny_config(), "tiny").measure.plan.warmup.min_time_s is None
    given = load_settings(tiny_config(measure={"warmup_min_time_s": 2.5}), "tiny")
    assert given.measure.plan.warmup.min_time_s == 2.5
    assert given.measure.screen_plan.warmup.min_time_s == 2.5, "search trials warm up alike"
    with pytest.raises(ConfigError, match=r"^measure.warmup_min_time_s: expected a number >= 0 or null, got -1$"):
        load_settings(tiny_config(measure={"warmup_min_time_s": -1}), "tiny")
