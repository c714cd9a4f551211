"""Warm-up detection on exact step-time sequences."""

from __future__ import annotations

from autotune.measure.warmup import WarmupPolicy, excess_time

POLICY = WarmupPolicy(min_steps=4, max_steps=10, span=2, tolerance=0.1)


def test_settled_when_the_recent_median_matches_the_one_before():
    assert POLICY.is_stable([5.0, 1.0, 1.0, 1.0, 1.05])
    assert not POLICY.is_stable([5.0, 3.0, 1.0, 1.0]), "median 4.0 before vs 1.0 now"


def test_never_settled_before_the_minimum_number_of_steps():
    assert not POLICY.is_stable([1.0, 1.0, 1.0])
    assert not WarmupPolicy(min_steps=8, span=2).is_stable([1.0] * 7)


def test_one_outlier_does_not_move_a_median_of_three():
    policy = WarmupPolicy(min_steps=6, span=3, tolerance=0.1)
    assert policy.is_stable([1.0, 1.0, 9.0, 1.0, 1.0, 1.0])


def test_gives_up_at_the_step_cap():
    assert not POLICY.gives_up([1.0] * 9)
    assert POLICY.gives_up([1.0] * 10)


def test_excess_time_is_what_exceeds_the_typical_step():
    assert excess_time([10.0, 2.0, 0.5, 1.0], typical_step_s=1.0) == 10.0


def test_without_a_span_each_median_takes_half_the_minimum_steps():
    assert [WarmupPolicy(min_steps=n).compared for n in (8, 4, 3, 1)] == [4, 2, 1, 1]
    # A mymodel step on 2 cores after its first (workers starting, the loss checked): medians of 2 settle at step 5.
    policy = WarmupPolicy(min_steps=4, tolerance=0.15)
    steps = [2.95, 0.84, 0.49, 0.53, 0.61]
    assert not policy.is_stable(steps[:4]) and policy.is_stable(steps)
    assert not WarmupPolicy(min_steps=8, tolerance=0.15).is_stable(steps + [0.51, 0.53, 0.58]), "4 against 4"
