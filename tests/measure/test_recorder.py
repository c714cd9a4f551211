"""Step timing driven by a fake clock: exact figures, no sleeps."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

from autotune.errors import AutotuneError
from autotune.measure.recorder import DONE, DRAIN, WARMUP, WINDOW, StepRecorder, WindowPlan
from autotune.measure.warmup import WarmupPolicy


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(recorder: StepRecorder, clock: FakeClock, steps, samples=8, until_done=True):
    """Drive the recorder: ``steps`` yields (data_s, transfer_s, compute_s) per step."""
    recorder.start()
    for data_s, transfer_s, compute_s in steps:
        clock.now += data_s
        recorder.batch_ready()
        clock.now += transfer_s
        recorder.batch_transferred()
        clock.now += compute_s
        recorder.step_done(samples)
        if until_done and recorder.done:
            break
    return recorder


def steady(data_s, transfer_s, compute_s):
    while True:
        yield data_s, transfer_s, compute_s


FAST_WARMUP = WarmupPolicy(min_steps=2, max_steps=50, span=1, tolerance=0.01)


def test_window_counts_samples_over_wall_time_and_splits_the_step():
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=10.0, warmup=FAST_WARMUP)
    timing = run(StepRecorder(plan, clock), clock, steady(0.01, 0.005, 0.025)).timing()
    assert timing.steps == 25, "1.0 s of 0.04 s steps"
    assert timing.samples == 200
    assert timing.throughput == pytest.approx(200.0)
    assert timing.steps_per_s == pytest.approx(25.0)
    assert timing.mean_step_s == pytest.approx(0.04) == timing.median_step_s
    assert timing.step_iqr_s == pytest.approx(0.0)
    assert timing.data_wait_s == pytest.approx(0.25)
    assert timing.transfer_s == pytest.approx(0.125)
    assert timing.compute_s == pytest.approx(0.625)
    assert timing.data_stall_fraction == pytest.approx(0.25)
    assert timing.throughput_ci95_low == pytest.approx(200.0) == timing.throughput_ci95_high
    assert timing.warmup_steps == 2 and timing.warmup_settled


def test_warmup_lasts_until_step_times_settle_and_compile_time_is_the_excess():
    clock = FakeClock()
    compile_then_steady = [(0.0, 0.0, 30.0), (0.0, 0.0, 5.0), (0.0, 0.0, 0.5), (0.0, 0.0, 0.2), (0.0, 0.0, 0.1)]
    steps = iter(compile_then_steady + [(0.0, 0.0, 0.1)] * 100)
    policy = WarmupPolicy(min_steps=2, max_steps=50, span=2, tolerance=0.1)
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=10.0, warmup=policy)
    timing = run(StepRecorder(plan, clock), clock, steps).timing(compiling=True)
    assert timing.warmup_steps == 8, "the last two steps' median matches the two before only at step 8"
    assert timing.warmup_settled
    assert timing.steps == 5 and timing.window_s == pytest.approx(0.5)
    assert timing.compile_s == pytest.approx(29.9 + 4.9 + 0.4 + 0.1)
    assert timing.warmup_s == pytest.approx(36.1)

    recorder = run(
        StepRecorder(plan, clock), clock, iter(compile_then_steady + [(0.0, 0.0, 0.1)] * 5), until_done=False
    )
    progress = recorder.progress(compiling=True)
    assert progress.steps == 2 and progress.compile_s == pytest.approx(timing.compile_s), "known before the end"
    assert recorder.progress().compile_s == 0.0


def test_warmup_that_never_settles_gives_up_at_the_cap():
    clock = FakeClock()
    alternating = iter([(0.0, 0.0, 0.1 if i % 2 else 0.3) for i in range(1000)])
    policy = WarmupPolicy(min_steps=2, max_steps=12, span=1, tolerance=0.05)
    plan = WindowPlan(min_steps=4, min_time_s=0.0, max_time_s=10.0, warmup=policy)
    timing = run(StepRecorder(plan, clock), clock, alternating).timing()
    assert timing.warmup_steps == 12 and not timing.warmup_settled
    assert timing.compile_s == 0.0, "no compile time unless compiling"


def test_max_time_ends_a_window_of_slow_steps():
    clock = FakeClock()
    plan = WindowPlan(min_steps=100, min_time_s=1.0, max_time_s=5.0, warmup=FAST_WARMUP)
    timing = run(StepRecorder(plan, clock), clock, steady(0.0, 0.0, 2.0)).timing()
    assert timing.steps == 3 and timing.window_s == pytest.approx(6.0)


@pytest.mark.parametrize("ends_by", ["min_steps", "max_time_s"])
def test_a_window_of_accumulated_micro_batches_ends_on_a_whole_optimizer_step(ends_by):
    clock = FakeClock()
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=10.0, warmup=FAST_WARMUP, step_multiple=4)
    if ends_by == "max_time_s":
        plan = replace(plan, min_steps=100, max_time_s=1.0)
    timing = run(StepRecorder(plan, clock), clock, steady(0.0, 0.0, 0.2)).timing()
    assert timing.steps == 8, "two whole optimizer steps of four micro-batches, not five micro-batches"


def test_a_noise_free_accumulating_loop_has_a_point_interval():
    # Accumulation 4: every fourth micro-step also steps the optimizer. Blocks of 5 or 6 micro-steps would hold one
    # or two optimizer steps, and the interval would come from where their boundaries fall (1831-2511 samples/s).
    clock = FakeClock()
    plan = WindowPlan(min_steps=32, min_time_s=0.0, max_time_s=100.0, warmup=FAST_WARMUP, step_multiple=4)
    pattern = itertools.cycle([(0.0, 0.0, 0.01)] * 3 + [(0.0, 0.0, 0.03)])
    timing = run(StepRecorder(plan, clock), clock, pattern, samples=32).timing()
    assert timing.steps == 32 and timing.throughput == pytest.approx(2133.33, rel=1e-3)
    assert timing.throughput_ci95_low == pytest.approx(timing.throughput, rel=1e-3)
    assert timing.throughput_ci95_high == pytest.approx(timing.throughput, rel=1e-3)


def test_an_unbounded_window_lasts_until_the_caller_stops():
    clock = FakeClock()
    recorder = StepRecorder(WindowPlan.unbounded(FAST_WARMUP), clock)
    run(recorder, clock, [(0.0, 0.0, 0.1)] * 500, until_done=False)
    assert recorder.phase == WINDOW
    assert recorder.timing().steps == 498


def test_noisy_steps_give_a_confidence_interval_around_the_throughput():
    clock = FakeClock()
    noisy = iter([(0.0, 0.0, 0.1)] * 2 + [(0.0, 0.0, 0.08 if i % 7 < 3 else 0.12) for i in range(200)])
    plan = WindowPlan(min_steps=100, min_time_s=0.0, max_time_s=100.0, warmup=FAST_WARMUP)
    timing = run(StepRecorder(plan, clock), clock, noisy).timing()
    assert timing.throughput_ci95_low < timing.throughput < timing.throughput_ci95_high
    assert timing.step_iqr_s == pytest.approx(0.04)


def test_a_loop_that_ends_in_warmup_has_no_timing():
    clock = FakeClock()
    recorder = run(StepRecorder(WindowPlan(), clock), clock, [(0.0, 0.0, 0.1)] * 3)
    assert recorder.phase != DONE
    with pytest.raises(AutotuneError, match="ended during warm-up after 3 steps"):
        recorder.timing()


def test_drained_steps_after_warm_up_are_not_timed_and_the_window_starts_after_the_last():
    clock = FakeClock()
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=10.0, warmup=FAST_WARMUP)
    recorder = StepRecorder(plan, clock)
    run(recorder, clock, [(0.0, 0.0, 0.1)] * 3, until_done=False)  # warm-up settles at its second step
    assert recorder.phase == WINDOW and recorder.timing().steps == 1
    recorder = StepRecorder(plan, clock)
    run(recorder, clock, [(0.0, 0.0, 0.1)] * 2, until_done=False)
    recorder.drain(3)
    assert recorder.phase == DRAIN and recorder.before_window
    run(recorder, clock, [(0.05, 0.0, 0.1)] * 3 + [(0.1, 0.0, 0.1)] * 5)
    timing = recorder.timing()
    assert timing.steps == 5 and timing.window_s == pytest.approx(1.0), "the drained steps are left out"
    assert timing.data_wait_s == pytest.approx(0.5) and not recorder.before_window
    assert timing.warmup_steps == 2 + 3 and timing.warmup_s == pytest.approx(0.2 + 0.45), "untimed, not unaccounted"


def test_nothing_is_drained_without_batches_loaded_ahead_nor_once_the_window_has_steps():
    clock = FakeClock()
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=10.0, warmup=FAST_WARMUP)
    recorder = StepRecorder(plan, clock)
    assert recorder.phase == WARMUP and recorder.before_window
    run(recorder, clock, [(0.0, 0.0, 0.1)] * 2, until_done=False)
    recorder.drain(0)
    assert recorder.phase == WINDOW
    run(recorder, clock, [(0.0, 0.0, 0.1)], until_done=False)
    recorder.drain(3)
    assert recorder.phase == WINDOW, "a window under way is not interrupted"
