"""Step timing driven by a fake clock: exact figures, no sleeps."""

from __future__ import annotations

import itertools
import random
import statistics
from dataclasses import replace

import pytest

from autotune.errors import AutotuneError
from autotune.measure.recorder import (
    DONE,
    DRAIN,
    WARMUP,
    WINDOW,
    StepRecorder,
    StepSplit,
    WindowPlan,
    sampled_total,
)
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


def test_an_accumulating_window_is_judged_over_its_whole_optimizer_steps_so_far():
    # Accumulation 4: three micro-steps of 10 ms, then one of 30 ms that also steps the optimizer. A figure read
    # after a micro-step short of a whole optimizer step leaves the long one out, or holds one more, by chance.
    clock = FakeClock()
    plan = WindowPlan(min_steps=100, min_time_s=0.0, max_time_s=100.0, warmup=FAST_WARMUP, step_multiple=4)
    recorder, judged = StepRecorder(plan, clock), []
    pattern = itertools.cycle([(0.0, 0.0, 0.01)] * 3 + [(0.0, 0.0, 0.03)])
    recorder.start()
    for data_s, transfer_s, compute_s in itertools.islice(pattern, 80):
        clock.now += data_s + transfer_s + compute_s
        recorder.step_done(32)
        if recorder.progress() is not None:
            judged.append(recorder.progress_to_judge())
    assert judged[:3] == [None] * 3, "no whole optimizer step yet"
    assert {judge.steps for judge in judged[3:]} == set(range(4, len(judged) + 1, 4))
    assert all(judge.throughput == pytest.approx(4 * 32 / 0.06) for judge in judged[3:])


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


def test_a_window_of_whole_epochs_counts_its_steps_from_the_end_of_the_drain():
    clock = FakeClock()
    plan = WindowPlan(min_steps=5, min_time_s=0.0, max_time_s=10.0, warmup=FAST_WARMUP, epoch_steps=7)
    recorder = StepRecorder(plan, clock)
    run(recorder, clock, [(0.0, 0.0, 0.1)] * 2, until_done=False)
    recorder.drain(3)
    run(recorder, clock, itertools.repeat((0.0, 0.0, 0.1)))
    timing = recorder.timing()
    assert timing.epochs == 1 and timing.steps == 7 and timing.warmup_steps == 2 + 3


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


def test_a_total_known_on_a_sample_of_steps_is_the_hosts_total_corrected_by_the_sample():
    # The device sat idle for a batch on 5 % of steps, 50 ms each; the host read each wait with the device's work
    # still queued when it began (up to 2 ms). One step in twenty sampled at random: the sample alone mostly held
    # none of the long waits or two of them; corrected host readings stay within a quarter of the total.
    draws = random.Random(7)
    idle = [0.05 if draws.random() < 0.05 else 0.0 for _ in range(400)]
    host = [wait + draws.uniform(0.0, 0.002) for wait in idle]
    errors, scaled_errors = [], []
    for _ in range(200):
        indices = [i for i in range(len(idle)) if draws.random() < 0.05] or [0]
        sampled = [idle[i] for i in indices]
        errors.append(sampled_total(host, sampled, indices) / sum(idle) - 1)
        scaled_errors.append(statistics.fmean(sampled) * len(idle) / sum(idle) - 1)
    assert abs(statistics.fmean(errors)) < 0.02, "unbiased"
    assert max(map(abs, errors)) < 0.25
    assert sum(abs(error) > 0.25 for error in scaled_errors) > 100, "where a sample alone is off by more"


def bursts(stall_s: float, cycle_steps: int, step_s: float, offset: int):
    """A loop whose loader stalls ``stall_s`` before every ``cycle_steps``-th batch (an epoch boundary; workers whose
    batches come in waves) and has the others ready at once, each step computing ``step_s``; ``offset`` steps into
    its cycle at the start."""
    for k in itertools.count(offset):
        yield (stall_s if k % cycle_steps == 0 else 0.0), 0.0, step_s


@pytest.mark.parametrize("offset", range(1, 16, 3))
def test_a_window_of_a_loop_that_stalls_for_its_loader_holds_whole_cycles_whatever_its_phase(offset):
    # A 0.4 s stall, then 16 steps of 10 ms: 16 x 8 samples every 0.56 s. A window ended at the first step past its
    # minimum time mostly ends just after a stall, which takes most of the time; started anywhere but just after
    # one, it held a stall more than bursts and read up to a quarter low.
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP)
    timing = run(StepRecorder(plan, clock), clock, bursts(0.4, 16, 0.01, offset)).timing()
    assert timing.throughput == pytest.approx(16 * 8 / 0.56)
    assert timing.steps == 32 and timing.data_stall_fraction == pytest.approx(0.8 / 1.12)


@pytest.mark.parametrize(("loop", "trimmed"), [(bursts(0.4, 16, 0.01, 1), 14), (steady(0.0, 0.0, 0.01), 0)])
def test_the_steps_left_out_of_a_window_to_start_it_after_a_stall_are_counted(loop, trimmed):
    # Whoever counts what happened over the window's steps (the loss scaler's skips) leaves these out too. Warmed up
    # over the cycle's steps 1 and 2, the window ran 14 steps to its first stall's end, and started after them.
    clock, driven = FakeClock(), itertools.count()
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP)
    recorder = run(StepRecorder(plan, clock), clock, (step for step, _ in zip(loop, driven, strict=False)))
    assert recorder.trimmed_steps == trimmed
    assert len(recorder.warmup_times) + recorder.trimmed_steps + recorder.timing().steps == next(driven)
    assert recorder.progress_to_judge() == recorder.progress(), "the window as it ended, trimmed or not"


def test_a_window_whose_loop_stalled_once_or_stopped_stalling_ends_at_its_usual_step():
    # A one-off stall (a collection, one slow read) or stalls that stop coming say nothing of a cycle to align to.
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP)
    fast, stall = (0.0, 0.0, 0.01), (0.1, 0.0, 0.01)
    for stalls in ([fast] * 4 + [stall], [fast] * 4 + [stall, *[fast] * 4, stall]):
        clock = FakeClock()
        timing = run(StepRecorder(plan, clock), clock, itertools.chain(stalls, itertools.repeat(fast))).timing()
        assert timing.window_s == pytest.approx(1.0, abs=0.01), stalls


def test_hiccups_that_take_a_small_share_of_the_window_do_not_hold_it():
    # Two 35 ms pauses of the OS in a 2 s window of 10 ms steps, the second on the step that ends it: long waits,
    # but 3.5 % of the window. Aligned to, they would have held the window for 3 s more, to move its figure by less.
    clock, fast, hiccup = FakeClock(), (0.0, 0.0, 0.01), (0.035, 0.0, 0.01)
    plan = WindowPlan(min_steps=10, min_time_s=2.0, max_time_s=30.0, warmup=FAST_WARMUP)
    steps = itertools.chain([fast] * 7, [hiccup], [fast] * 187, [hiccup], itertools.repeat(fast))
    assert run(StepRecorder(plan, clock), clock, steps).timing().window_s == pytest.approx(2.01)


def test_under_gradient_accumulation_a_window_ends_on_whole_optimizer_steps_stalls_or_not():
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, step_multiple=4, warmup=FAST_WARMUP)
    timing = run(StepRecorder(plan, clock), clock, bursts(0.4, 16, 0.01, 5)).timing()
    assert timing.steps % 4 == 0 and timing.window_s < 1.0 + 4 * 0.41


@pytest.mark.parametrize("offset", [1, 30, 62, 97])
def test_a_window_of_a_loader_whose_epochs_start_with_a_stall_holds_whole_epochs_wherever_it_starts(offset):
    # 100 steps of 10 ms an epoch, its first batch after a 0.4 s stall (workers start again or refill their queue).
    # A 1 s window ended by its time mostly held no stall and read 1.4x a long run's figure; one of whole epochs'
    # steps holds one stall an epoch, as training does.
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP, epoch_steps=100)
    timing = run(StepRecorder(plan, clock), clock, bursts(0.4, 100, 0.01, offset)).timing()
    assert timing.epochs == 1 and timing.steps == 100
    assert timing.throughput == pytest.approx(100 * 8 / 1.4)
    longer = replace(plan, min_time_s=1.5)
    timing = run(StepRecorder(longer, clock), clock, bursts(0.4, 100, 0.01, offset)).timing()
    assert timing.epochs == 2 and timing.steps == 200 and timing.throughput == pytest.approx(100 * 8 / 1.4)


@pytest.mark.parametrize(("offset", "min_time_s", "epochs"), [(97, 1.0, 1), (97, 1.5, 2), (30, 1.5, 2)])
def test_a_window_of_whole_epochs_is_judged_over_its_whole_epochs_so_far(offset, min_time_s, epochs):
    # Epochs of 100 steps of 10 ms, each after a 0.4 s stall. Started 3 steps before a stall, the figure so far
    # reads a fraction of the loop's just past it; over 1.5 epochs it holds two stalls (reads 0.91x) or, started 70
    # steps before one, one (1.1x). A pruner judging such readings would stop a configuration as fast as any.
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=min_time_s, max_time_s=30.0, warmup=FAST_WARMUP, epoch_steps=100)
    recorder, readings = StepRecorder(plan, clock), []
    recorder.start()
    for data_s, transfer_s, compute_s in bursts(0.4, 100, 0.01, offset):
        clock.now += data_s
        recorder.batch_ready()
        clock.now += transfer_s
        recorder.batch_transferred()
        clock.now += compute_s
        recorder.step_done(8)
        if recorder.progress() is not None:
            readings.append((recorder.progress(), recorder.progress_to_judge()))
        if recorder.done:
            break
    final = recorder.timing().throughput
    assert recorder.timing().epochs == epochs and final == pytest.approx(100 * 8 / 1.4)
    assert any(abs(seen.throughput / final - 1) > 0.05 for seen, _ in readings), "the hazard: part of an epoch"
    judged = [judge for _, judge in readings if judge is not None]
    assert {judge.steps for judge in judged} == {100 * epoch for epoch in range(1, epochs + 1)}
    assert all(judge.throughput == pytest.approx(final) for judge in judged)
    unbounded = StepRecorder(WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP), clock)
    run(unbounded, clock, steady(0.0, 0.0, 0.01))
    assert unbounded.progress_to_judge() == unbounded.progress(), "no epochs to wait for: judged as read"


def test_a_window_of_whole_epochs_is_judged_with_the_warm_ups_compile_time():
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=0.5, max_time_s=30.0, warmup=FAST_WARMUP, epoch_steps=20)
    steps = itertools.chain([(0.0, 0.0, 3.0)], itertools.repeat((0.0, 0.0, 0.01), 35))
    recorder = run(StepRecorder(plan, clock), clock, steps, until_done=False)
    judged, seen = recorder.progress_to_judge(compiling=True), recorder.progress(compiling=True)
    assert judged.steps == 20 and seen.steps > 20
    assert judged.compile_s == seen.compile_s > 2.9 and recorder.progress_to_judge().compile_s == 0.0


def test_a_window_of_whole_epochs_ends_on_the_first_epochs_end_past_its_minimum_time_whatever_the_pace():
    # Warm-up settles at 20 ms a step (2 epochs of 50 steps for 1.2 s), then the steps take 10 ms: 2 epochs are 1 s.
    clock, slow, fast = FakeClock(), (0.0, 0.0, 0.02), (0.0, 0.0, 0.01)
    plan = WindowPlan(min_steps=10, min_time_s=1.2, max_time_s=30.0, warmup=FAST_WARMUP, epoch_steps=50)
    timing = run(StepRecorder(plan, clock), clock, itertools.chain([slow] * 2, itertools.repeat(fast))).timing()
    assert timing.epochs == 3 and timing.steps == 150 and timing.window_s == pytest.approx(1.5)


def test_a_window_whose_whole_epochs_take_longer_than_foreseen_ends_as_any_other_by_half_its_longest_time():
    # Warm-up paced 10 ms a step (1 s an epoch of 100), then 200 ms: whole epochs would take 20 s.
    clock, fast, slow = FakeClock(), (0.0, 0.0, 0.01), (0.0, 0.0, 0.2)
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP, epoch_steps=100)
    timing = run(StepRecorder(plan, clock), clock, itertools.chain([fast] * 3, itertools.repeat(slow))).timing()
    assert timing.epochs == 0 and timing.window_s == pytest.approx(15.0, abs=0.21)


def test_a_window_of_epochs_too_long_to_time_whole_ends_by_its_steps_and_time():
    clock = FakeClock()
    plan = WindowPlan(min_steps=10, min_time_s=1.0, max_time_s=30.0, warmup=FAST_WARMUP, epoch_steps=1600)
    timing = run(StepRecorder(plan, clock), clock, steady(0.0, 0.0, 0.01)).timing()
    assert timing.epochs == 0 and timing.window_s == pytest.approx(1.0, abs=0.01), "16 s an epoch: over half of 30 s"


def test_whole_epochs_are_the_fewest_that_fill_the_window_where_they_take_half_its_longest_time_at_most():
    plan = WindowPlan(min_steps=15, min_time_s=2.0, max_time_s=30.0)

    def whole(epoch_steps, step_times, **changes):
        return replace(plan, epoch_steps=epoch_steps, **changes).whole_epochs(step_times)

    assert whole(100, [0.01] * 8) == 2, "2 s at 1 s an epoch"
    assert whole(4, [0.1] * 8) == 5, "at least 15 steps: 20"
    assert whole(100, [0.15] * 8) == 1 and whole(100, [0.151] * 8) == 0, "15 s: half of 30"
    waves = [0.02, 0.02, 0.02, 0.3] * 2  # workers that deliver in waves: the median step hides the waits
    assert whole(200, waves) == 0 and whole(40, waves) == 1, "paced by the mean: 0.09 s"
    assert whole(8, [1.0] * 8 + [0.01] * 8) == 25, "paced by the last epoch's worth (by all: 2)"
    steps = [1.0] * 8 + [0.25] * 3 + [1.0]
    assert whole(1, steps, min_steps=1) == 5, "and at least the warm-up's compared steps (by the last alone: 2)"
    assert whole(None, [0.01] * 8) == 0, "a stream's length is unknown"
    assert whole(100, [0.01] * 8, step_multiple=4) == 0, "micro-batches end windows themselves"
    assert whole(100, [0.01] * 8, min_time_s=16.0, max_time_s=30.0) == 0, "over half of max_time_s at any pace"
    assert replace(WindowPlan.unbounded(), epoch_steps=100).whole_epochs([0.01] * 8) == 0


def test_a_device_sample_of_a_window_started_later_keeps_its_steps_from_there():
    split = StepSplit([0.1, 0.2, 0.3], [0.0, 0.0, 0.0], [1.0, 2.0, 3.0], [8, 8, 4], indices=[0, 3, 5])
    later = split.from_step(3)
    assert later.indices == [0, 2] and later.waits == [0.2, 0.3] and later.samples == [8, 4]
    assert split.from_step(6) is None
