"""mode=check's gate against the recorded gain's noise: a gain recorded without an interval is one observation whose
noise the rounds now estimate (a prediction interval; with the baseline's runs steady, as here, one round's), the
bound of both measurements' noise grows with either, and a verdict that no rounds would tell says why."""

from __future__ import annotations

import math
import statistics

import pytest

from autotune.measure.stats import RatioInterval, t95
from autotune.report.check import verdict_line
from autotune.results.benchmark import Benchmark, Entry
from autotune.results.check import Check


def check(before: float, speedup: float, spread: float, rounds: int, before_interval=None) -> Check:
    """A check of ``before`` (recorded from single runs where ``before_interval`` is None) whose ``rounds`` rounds
    read ``speedup`` (their geometric mean), their logarithms' standard deviation ``spread``, against a baseline of
    100 samples/s."""
    steps = [i - (rounds - 1) / 2 for i in range(rounds)]
    scale = spread / statistics.stdev(steps)
    entries = [
        Entry("baseline", "baseline", None, {}, throughputs=[100.0] * rounds),
        Entry("recommended", "recommended", None, {"batch_size": 32}, throughputs=[]),
    ]
    entries[1].throughputs.extend(100.0 * speedup * math.exp(scale * step) for step in steps)
    benchmark = Benchmark("tiny", "cpu", rounds, "report.json", {}, entries)
    return Check(before, 0.10, benchmark, before_interval, before_rounds=0 if before_interval is None else None)


# A gain recorded from single runs: one run of each, its noise estimated by the rounds now (a steady baseline's: a
# round's).


def test_a_fall_far_beyond_one_rounds_noise_from_a_gain_recorded_from_single_runs_regresses():
    # The review's case: 2.00x from single runs; 1.40x (1.36-1.44) over 5 rounds at 2.4 % a round. Counted with one
    # degree of freedom (t = 12.7) a fall of 30 % held; as a prediction, one round's noise at now's 4 degrees of
    # freedom, it lies 0.25 below the floor in logarithms against a bound of 0.073.
    record = check(2.0, 1.40, 0.024, 5)
    assert record.now.high < record.floor == pytest.approx(1.8)
    assert record.noise == pytest.approx(t95(4) * 0.024 * math.sqrt(1 + 1 / 5))
    assert record.regressed and record.verdict == "regressed"
    assert verdict_line(record).startswith("regressed: 1.40x now (95 % interval 1.36-1.44) lies below the floor")


def test_a_fall_within_the_prediction_interval_holds():
    # 1.70x (1.64-1.76) at 3 % a round: 0.057 below the floor, within one round's noise (1.96 x 0.03 at the most
    # rounds): no number of rounds now tells it from that noise.
    within = check(2.0, 1.70, 0.03, 5)
    assert within.now.high < within.floor and not within.regressed and within.passed
    assert within.noise == pytest.approx(t95(4) * 0.03 * math.sqrt(1 + 1 / 5))
    assert math.log(within.floor / within.now.geomean) < within.noise
    assert within.loose_gate
    assert "no number of rounds now can tell this fall from that noise" in verdict_line(within)


def test_more_rounds_now_tighten_the_gate_on_a_gain_recorded_from_single_runs():
    # 1.62x at 4 % a round: within the noise over 3 or 5 rounds, which 7 would tell; over 10 it regresses. With one
    # degree of freedom for the record, the bound stayed near 12.7 rounds' noise however many rounds ran.
    noises = [check(2.0, 1.62, 0.04, rounds).noise for rounds in (3, 5, 10, 20)]
    assert noises == sorted(noises, reverse=True)
    assert noises[-1] == pytest.approx(t95(19) * 0.04 * math.sqrt(1 + 1 / 20)), "down towards 1.96 x 0.04"
    for rounds in (3, 5):
        record = check(2.0, 1.62, 0.04, rounds)
        assert record.passed and record.rounds_to_tell == 7
        assert verdict_line(record).endswith("(at this noise about check.rounds=7 would tell)")
    assert check(2.0, 1.62, 0.04, 10).regressed


# The bound of both measurements' noise grows with either.


@pytest.mark.parametrize("rounds", [3, 5, 10])
@pytest.mark.parametrize(
    "recorded",
    [RatioInterval(1.8, 1.45, 2.23, 2), RatioInterval(1.8, 1.6, 2.02, 3), RatioInterval(1.8, 1.7, 1.9, 5), None],
    ids=["2-rounds", "3-rounds", "5-rounds", "single-runs"],
)
def test_a_noisier_measurement_now_never_reads_a_tighter_bound(recorded, rounds):
    # Floored Welch-Satterthwaite degrees of freedom jumped (recorded over 2 rounds, 1.26x over 5 rounds: 2.2 % a
    # round regressed, 2.4 % held, 2.6 % regressed); at fractional ones t still fell faster than the error grew.
    spreads = [i / 1000 for i in range(1, 121)]
    records = [check(1.8, 1.26, spread, rounds, recorded) for spread in spreads]
    noises = [record.noise for record in records]
    assert all(a <= b for a, b in zip(noises, noises[1:], strict=False)), noises
    regressed = [record.regressed for record in records]
    assert regressed == sorted(regressed, reverse=True), "once a noisier measurement holds, a noisier one holds too"


@pytest.mark.parametrize(("rounds", "spread"), [(3, 0.01), (5, 0.025), (10, 0.06)])
def test_a_noisier_record_never_reads_a_tighter_bound(rounds, spread):
    for recorded_rounds in (2, 3, 5):
        widths = [i / 200 for i in range(1, 121)]
        records = [
            check(1.8, 1.26, spread, rounds, RatioInterval(1.8, 1.8 * math.exp(-w), 1.8 * math.exp(w), recorded_rounds))
            for w in widths
        ]
        noises = [record.noise for record in records]
        assert all(a <= b for a, b in zip(noises, noises[1:], strict=False)), (recorded_rounds, noises)


# Why no number of rounds up to 30 would tell.


def test_a_fall_the_recorded_gains_noise_keeps_from_telling_says_so():
    # 1.30x (1.07-1.59) at 16 % a round, against the floor of 1.80x of a gain from single runs: the rounds now alone
    # would lie wholly below the floor, but one round's noise (the record) takes more than 30 rounds to tell from.
    record = check(2.0, 1.30, 0.16, 5)
    assert record.now.high < record.floor and record.passed and not record.loose_gate
    assert record.rounds_to_tell is None and record.record_keeps_from_telling
    assert verdict_line(record).endswith(
        "but by less than the noise of both measurements (the gain before was measured too loosely for 30 rounds now "
        "to tell this fall from its noise; for a sharper gate, gate against the check.json of a check of more "
        "check.rounds that held, or tune with more study.confirm_rounds)"
    )
    # Just above the floor, only the rounds now decide: too close to it for 30 of them to tell.
    close = check(2.0, 1.81, 0.16, 5)
    assert close.rounds_to_tell is None and not close.record_keeps_from_telling
    assert verdict_line(close).endswith(
        "(the speedup now lies too close to the floor for 30 rounds to tell whether it is above it)"
    )
