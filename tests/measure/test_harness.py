"""The timing loop, driven by a fake clock: exact figures, no sleeps."""

from __future__ import annotations

import itertools

import pytest

from autotune.measure.harness import WindowPlan, time_training


class FakeClock:
    """Time advances only when the fake data loader or training step says so."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def fake_loop(clock, data_s, step_s, first_step_extra_s=0.0, batch=8):
    steps = itertools.count()

    def batches():
        while True:
            clock.now += data_s
            yield batch

    def train_step(_):
        clock.now += step_s + (first_step_extra_s if next(steps) == 0 else 0.0)

    return batches(), train_step


def test_window_counts_samples_over_wall_time_and_splits_data_from_compute():
    clock = FakeClock()
    batches, step = fake_loop(clock, data_s=0.01, step_s=0.03)
    plan = WindowPlan(warmup_steps=3, min_steps=10, min_time_s=1.0, max_time_s=10.0)
    timing = time_training(batches, step, len_of_batch := (lambda b: b), plan, clock=clock)
    assert timing.steps == 25, "1.0 s of 0.04 s steps"
    assert timing.samples == 25 * 8
    assert timing.throughput == pytest.approx(200.0)
    assert timing.steps_per_s == pytest.approx(25.0)
    assert timing.mean_step_s == pytest.approx(0.04)
    assert timing.median_step_s == pytest.approx(0.04)
    assert timing.data_wait_s == pytest.approx(0.25)
    assert timing.compute_s == pytest.approx(0.75)
    assert timing.data_stall_fraction == pytest.approx(0.25)
    assert len_of_batch(8) == 8


def test_warmup_and_compile_are_excluded_from_the_window():
    clock = FakeClock()
    batches, step = fake_loop(clock, data_s=0.0, step_s=0.1, first_step_extra_s=30.0)
    plan = WindowPlan(warmup_steps=2, min_steps=5, min_time_s=0.0, max_time_s=10.0)
    timing = time_training(batches, step, lambda b: b, plan, clock=clock, compiling=True)
    assert timing.steps == 5 and timing.window_s == pytest.approx(0.5)
    assert timing.first_step_s == pytest.approx(30.1)
    assert timing.compile_s == pytest.approx(30.0)


def test_compile_time_is_zero_when_not_compiling():
    clock = FakeClock()
    batches, step = fake_loop(clock, data_s=0.0, step_s=0.1, first_step_extra_s=2.0)
    timing = time_training(batches, step, lambda b: b, WindowPlan(1, 3, 0.0, 10.0), clock=clock)
    assert timing.compile_s == 0.0 and timing.first_step_s == pytest.approx(2.1)


def test_max_time_ends_a_window_of_slow_steps():
    clock = FakeClock()
    batches, step = fake_loop(clock, data_s=0.0, step_s=2.0)
    timing = time_training(batches, step, lambda b: b, WindowPlan(1, 100, 1.0, 5.0), clock=clock)
    assert timing.steps == 3 and timing.window_s == pytest.approx(6.0)


def test_sync_is_called_every_step_so_device_time_is_counted():
    clock = FakeClock()
    batches, step = fake_loop(clock, data_s=0.0, step_s=0.0)
    syncs = []

    def sync():
        syncs.append(1)
        clock.now += 0.05  # the device finishing queued work

    timing = time_training(batches, step, lambda b: b, WindowPlan(2, 4, 0.0, 10.0), sync=sync, clock=clock)
    assert len(syncs) == 2 + 4
    assert timing.compute_s == pytest.approx(0.2)
