"""Robust statistics against values worked out by hand."""

from __future__ import annotations

import pytest

from autotune.measure.stats import block_throughput_ci, coefficient_of_variation, quartiles, ratio_interval, t95


def test_quartiles():
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 3.0, 4.0)
    assert quartiles([7.0]) == (7.0, 7.0, 7.0)


def test_t_quantiles():
    assert t95(1) == 12.706 and t95(9) == 2.262
    # beyond the table, against exact quantiles (scipy.stats.t.ppf(0.975, df)): not the normal's 1.96, up to 4 % low
    exact = {31: 2.0395, 40: 2.0211, 100: 1.9840, 1000: 1.9623}
    assert all(t95(df) == pytest.approx(value, abs=2e-4) for df, value in exact.items())
    with pytest.raises(ValueError):
        t95(0)


def test_t_quantiles_at_fractional_degrees_of_freedom_fall_steadily_between_the_whole_ones():
    # Welch-Satterthwaite's degrees of freedom are fractional: floored, t jumped at each whole one.
    assert t95(2.0) == t95(2) == 4.303 and t95(30.0) == 2.042, "whole degrees as before"
    grid = [t95(1 + i / 100) for i in range(0, 6000)]
    assert all(a > b for a, b in zip(grid, grid[1:], strict=False)), "falling as the degrees grow, 30 to 31 too"
    # Against exact quantiles (mpmath, by the regularized incomplete beta): at most 3 % wide between 1 and 2, less
    # than 0.5 % from 2 on.
    exact = {1.4: 6.6570, 1.5: 6.0167, 2.5: 3.5747, 4.5: 2.6589, 30.5: 2.0409, 45.5: 2.0135}
    for df, value in exact.items():
        assert value <= t95(df) * (1 + 2e-4) and t95(df) <= value * (1.03 if df < 2 else 1.005), df
    with pytest.raises(ValueError):
        t95(0.99)


def test_block_ci_of_a_steady_run_is_a_point():
    assert block_throughput_ci([0.1] * 20, [10] * 20) == pytest.approx((100.0, 100.0))


def test_too_few_steps_for_two_blocks_give_no_interval():
    assert block_throughput_ci([0.1] * 9, [10] * 9) == (None, None), "one block of 5 steps: no spread to measure"


def test_block_ci_by_hand():
    # Two blocks of two steps: 20 samples in 0.2 s (0.01 s/sample) and 20 samples in 0.4 s (0.02 s/sample).
    low, high = block_throughput_ci([0.1, 0.1, 0.2, 0.2], [10, 10, 10, 10], blocks=2, min_block_steps=2)
    half = 12.706 * 0.0070710678118654745 / 2**0.5  # t(1) * stdev([0.01, 0.02]) / sqrt(2)
    assert low == pytest.approx(1 / (0.015 + half)) and high is None, "half is wider than the mean: unbounded"
    low, high = block_throughput_ci([0.1] * 10 + [0.12] * 10, [10] * 20, blocks=4)
    assert low < 20 * 10 / 2.2 < high, "the interval contains the window's throughput"


@pytest.mark.parametrize(
    ("pattern", "steps", "samples", "throughput"),
    [
        # Accumulation 4: three short micro-steps, then one with the optimizer step; 4 * 32 samples in 0.06 s.
        ([0.01, 0.01, 0.01, 0.03], 32, 32, 2133.33),
        # Accumulation 8 over 40 steps: 8 * 24 samples in 0.12 s.
        ([0.01] * 7 + [0.05], 40, 24, 1600.0),
    ],
)
@pytest.mark.parametrize("shift", [0, 1, 3], ids=lambda shift: f"starts-{shift}-into-a-step")
def test_blocks_hold_whole_optimizer_steps_so_a_noise_free_accumulating_run_is_a_point(
    pattern, steps, samples, throughput, shift
):
    durations = (pattern * (steps // len(pattern) + 1))[shift : shift + steps]
    low, high = block_throughput_ci(durations, [samples] * steps, step_multiple=len(pattern))
    assert (low, high) == pytest.approx((throughput, throughput), rel=1e-3)


def test_blocks_of_whole_optimizer_steps_leave_out_a_partial_one_at_the_end():
    durations = [0.01, 0.01, 0.01, 0.03] * 8 + [0.01, 0.01]
    assert block_throughput_ci(durations, [32] * 34, step_multiple=4) == pytest.approx((2133.33, 2133.33), rel=1e-3)
    assert block_throughput_ci(durations[:8], [32] * 8, step_multiple=4) == (None, None), "one block of 8 steps"
    with pytest.raises(ValueError):
        block_throughput_ci(durations, [32] * 34, step_multiple=0)


def test_ratio_interval_by_hand():
    # Three paired rounds: the geometric mean (1.2 * 1.5 * 1.35) ** (1 / 3) = 1.3444; the logarithms' standard
    # deviation 0.11163, so the half width on them is t(2) = 4.303 times 0.11163 / sqrt(3) = 0.27730.
    interval = ratio_interval([1.2, 1.5, 1.35])
    assert interval.n == 3
    assert (interval.geomean, interval.low, interval.high) == pytest.approx((1.34442, 1.01884, 1.77405), abs=1e-4)
    assert ratio_interval([1.2]) is None, "one round: no interval"


def test_coefficient_of_variation():
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
