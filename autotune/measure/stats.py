"""Robust summaries of step timings: median, interquartile range, and a confidence interval for throughput."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

# Two-sided 95 % quantiles of Student's t for 1..30 degrees of freedom (beyond 30, and between: ``t95``).
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


_Z975 = 1.959964  # the normal distribution's 97.5th percentile
# Rounds an interval of paired ratios needs: Student's t has no degrees of freedom from one (``ratio_interval``).
MIN_ROUNDS = 2
# Quiet rounds a gain needs left for slowed ones to be left out of it (``quiet_rounds``): over two, Student's t for 95 %
# is 12.7 and the interval bounds nothing (a 2.2x gain read 0.85-5.6x), over three 4.3; a slowed run reads about 0.94x
# of the same configuration's quiet ones (docs/benchmarks.md, section 13), far less than two rounds' interval gives up.
MIN_QUIET_ROUNDS = 3


def t95(degrees_of_freedom: float) -> float:
    """The 97.5th percentile of Student's t distribution: at whole degrees of freedom from the table up to 30, beyond
    by the Cornish-Fisher expansion of the normal's in 1/df (within 0.01 % of the exact value from 30 on); between
    whole degrees (Welch-Satterthwaite's are fractional), geometrically between its two neighbours' in 1/df, so it
    falls steadily as the degrees grow: at most 3 % above the exact value between 1 and 2, within 0.5 % from 2 on."""
    if degrees_of_freedom < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {degrees_of_freedom}")
    below = math.floor(degrees_of_freedom)
    if below == degrees_of_freedom:
        return _t95_whole(below)
    share = (1 / degrees_of_freedom - 1 / (below + 1)) / (1 / below - 1 / (below + 1))  # 1 at below, 0 above
    return _t95_whole(below + 1) ** (1 - share) * _t95_whole(below) ** share


def _t95_whole(degrees_of_freedom: int) -> float:
    """``t95`` at whole degrees of freedom (>= 1)."""
    if degrees_of_freedom <= len(_T95):
        return _T95[degrees_of_freedom - 1]
    z, df = _Z975, degrees_of_freedom
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """First quartile, median and third quartile (inclusive method; a single value is its own quartiles)."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, median, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, median, q3


def block_throughput_ci(
    durations: Sequence[float],
    samples: Sequence[int],
    blocks: int = 10,
    min_block_steps: int = 5,
    step_multiple: int = 1,
) -> tuple[float | None, float | None]:
    """95 % confidence interval of throughput by the method of batch means: (low, high).

    Consecutive steps are correlated (prefetch queues fill and drain), so single steps are not
    independent samples; contiguous blocks of at least ``min_block_steps`` steps are closer to it.
    The interval is taken on seconds per sample, which averages linearly, and inverted, so it is
    centred on the window's throughput rather than on the mean of block rates. It describes
    variation within this run only: run-to-run variation between processes is larger, and only
    repeated runs measure it. With fewer than two blocks there is no interval: (None, None); where the interval
    of seconds per sample reaches zero, throughput has no upper bound: high is None.

    Under gradient accumulation a step is a micro-step and ``step_multiple`` of them make one optimizer step, whose
    last micro-step is longer: each block holds whole multiples of ``step_multiple`` consecutive steps (at least
    ``min_block_steps``), so that blocks differ by noise, not by how many optimizer steps fall in them; steps after
    the last whole multiple are left out of the interval.
    """
    if step_multiple < 1:
        raise ValueError(f"step_multiple must be >= 1, got {step_multiple}")
    groups = len(durations) // step_multiple
    n_blocks = min(blocks, groups // -(-min_block_steps // step_multiple))
    if n_blocks < 2:
        return None, None
    bounds = [round(i * groups / n_blocks) * step_multiple for i in range(n_blocks + 1)]
    per_sample = [sum(durations[lo:hi]) / sum(samples[lo:hi]) for lo, hi in zip(bounds, bounds[1:], strict=False)]
    mean = statistics.fmean(per_sample)
    half = t95(n_blocks - 1) * statistics.stdev(per_sample) / n_blocks**0.5
    return 1 / (mean + half), (1 / (mean - half) if mean > half else None)


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation over mean."""
    return statistics.stdev(values) / statistics.fmean(values)


@dataclass(frozen=True)
class RatioInterval:
    """The geometric mean of ``n`` paired ratios and its 95 % confidence interval."""

    geomean: float
    low: float
    high: float
    n: int


def ratio_interval(ratios: Sequence[float]) -> RatioInterval | None:
    """The geometric mean of ``ratios`` (each of two runs measured close together, so pairing them cancels the
    machine's slower drifts) with Student's t interval on their logarithms; None with fewer than MIN_ROUNDS."""
    if len(ratios) < MIN_ROUNDS:
        return None
    logs = [math.log(ratio) for ratio in ratios]
    mean, half = statistics.fmean(logs), t95(len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return RatioInterval(math.exp(mean), math.exp(mean - half), math.exp(mean + half), len(logs))


def quiet_rounds(ratios: dict[int, float], slowed: set[int]) -> dict[int, float]:
    """The paired rounds' ``ratios`` (by round) a gain is stated from: those of the rounds not ``slowed`` (something
    beside one of the two runs slowed it: its ratio reads what the load did), where MIN_QUIET_ROUNDS or more are, and
    at least half of them; else all of them, and the reports name the slowed runs.
    Where most rounds were slowed, slowed is how this machine runs, not a passing load, and what it costs a run is
    small beside what leaving most rounds out costs the interval (Student's t for 95 % over two rounds is 12.7, over
    three 4.3, over five 2.8): on a host whose cores' reading flagged most runs, the flagged ones read 0.94x the same
    configuration's others (docs/benchmarks.md, section 13)."""
    quiet = {index: ratio for index, ratio in ratios.items() if index not in slowed}
    return quiet if len(quiet) >= MIN_QUIET_ROUNDS and 2 * len(quiet) >= len(ratios) else ratios
