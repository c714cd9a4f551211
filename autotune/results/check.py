"""What ``mode=check`` measured: a tuning run's recommendation against the baseline again, and whether its speedup held.

Its rule is written here once (``Check.regressed``): the speedup now is the geometric mean of the recommendation's
per-round ratios to the baseline, with its 95 % interval (``Benchmark.interval``); it regressed when it lies below
the speedup the tuning run recorded, less the tolerance, by more than the noise of both measurements allows (the
tuning run's own noise counts: a gain read from few noisy rounds, and picked as the fastest, reads high; so a
loosely recorded gain makes a loose gate; one recorded with no interval counts as one round, or one run of each, as
noisy as those now: ``Check.before_noise``). A check passes only when its rounds ended, with an interval and no
regression.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from typing import Any

from autotune.measure.stats import MIN_ROUNDS, RatioInterval, t95
from autotune.results.benchmark import Benchmark, Entry, blank_benchmark, unless_stopped, without_computed

# Rounds beyond which ``Check.loose_gate`` takes no number of rounds now to tell a fall from the noise.
RESOLVABLE_ROUNDS = 10_000
# The most rounds ``Check.rounds_to_tell`` names: beyond it, the speedup now sits too close to the floor to tell.
MAX_ROUNDS_TO_TELL = 30


@dataclass(frozen=True)
class Check:
    """A check of a recommendation whose tuning run recorded the speedup ``before`` over the baseline (with its 95 %
    interval ``before_interval``, None where it had none; in ``before_rounds`` rounds, report.json's
    ``speedup_rounds``: 0 for single runs, None where it does not say), measured again in ``benchmark`` (its entries:
    the baseline, then the recommendation; ``benchmark.recommended``: the report.json's path), allowed to fall by
    ``tolerance`` (a fraction of ``before``) beyond the measured noise."""

    before: float
    tolerance: float
    benchmark: Benchmark
    before_interval: RatioInterval | None = None
    before_rounds: int | None = None

    @property
    def stopped(self) -> bool:
        """Whether its rounds did not all run (an interrupt, an error: ``Benchmark.stopped``), so it decides
        nothing."""
        return self.benchmark.stopped

    @property
    def recommended(self) -> Entry:
        return self.benchmark.entries[1]

    @property
    def now(self) -> RatioInterval | None:
        """The speedup now, with its 95 % interval; None where too few rounds paired the two for an interval."""
        return self.benchmark.interval(self.recommended)

    @property
    def floor(self) -> float:
        """The lowest speedup the recommendation may keep: ``before`` less the tolerance."""
        return self.before * (1 - self.tolerance)

    @property
    def regressed(self) -> bool:
        """The rule: the speedup regressed when the upper bound of its 95 % interval now lies below
        ``before * (1 - tolerance)`` and its logarithm lies below the floor's by more than the 95 % bound of the
        difference of the two measurements (``noise``: Welch's t on the logarithms), the tuning run's noise as
        ``before_noise`` reads it: it only loosens the gate. A fall the noise could explain is no regression; without
        an interval now there is no verdict (``verdict``: not measured, which fails the check as well)."""
        now = self.now
        return now is not None and now.high < self.floor and math.log(self.floor / now.geomean) > self.noise

    @property
    def noise(self) -> float:
        """How far below the floor, in logarithms, the speedup now may read by the two measurements' noise alone;
        infinite without an interval now."""
        now = self.now
        if now is None:
            return math.inf
        return _bound(self.before_noise(now.n, _spread(now)))

    def before_noise(self, rounds: int, spread: float) -> list[tuple[float, int]]:
        """The errors, in logarithms, of the speedup now over ``rounds`` rounds (``spread``: the standard deviation of
        a round's logarithm, from the rounds now) less the recorded one, as ``_bound`` combines them: one standard
        error with its degrees of freedom for each independent estimate of a variance.
        Where the tuning run recorded an interval, the recorded speedup's error is read from it, with its rounds'
        degrees of freedom: two estimates, now's and its own. Where it recorded none, it is one observation whose noise
        only the rounds now estimate, so the difference is a prediction, one estimate at now's ``rounds - 1`` degrees
        of freedom (its parts come from the same rounds: counted apart, Welch-Satterthwaite would count those degrees
        twice and tighten the gate). The observation: of one round of a race (``before_rounds`` 1), a ratio as noisy
        as a round's now; else (single runs: 0, not said, or a race whose winner and baseline paired in fewer than two
        rounds, its medians unpaired), one run of each taken apart, as noisy as one run of each now (``run_spreads``),
        so the machine's drift across the rounds, which a round cancels and runs apart do not, counts; and never
        known better than a round's ratio (runs of the two that happened to move apart now read a smaller sum than
        their ratios' spread). The drift counted is what the rounds now see: a slower or rarer one the tuning run met
        is under-read. So more rounds now tighten the gate on it, down to the normal's bound of the record's noise."""
        now = spread / math.sqrt(rounds)
        before = self.before_interval
        if before is not None:
            return [(now, rounds - 1), (_standard_error(before), before.n - 1)]
        record = spread if self.before_rounds == 1 else max(spread, math.hypot(*self.run_spreads))
        return [(math.hypot(now, record), rounds - 1)]

    @cached_property  # ``before_noise`` reads it for each number of rounds ``_first_telling`` tries
    def run_spreads(self) -> tuple[float, float]:
        """The standard deviations of the logarithm of one run of the baseline and of the recommendation, each across
        its runs now that ran (those a round's ratio leaves out as slowed too)."""
        return _log_spread(self.benchmark.baseline), _log_spread(self.recommended)

    @property
    def loose_gate(self) -> bool:
        """Whether the speedup now lies below the floor by too little for any number of rounds now to tell it from
        the two measurements' noise (up to RESOLVABLE_ROUNDS): the tuning run's part stays however many run, so it
        cannot regress (``regressed``)."""
        now = self.now
        if now is None or now.geomean >= self.floor:
            return False
        return self._first_telling(RESOLVABLE_ROUNDS) is None

    @property
    def rounds_to_tell(self) -> int | None:
        """About how many rounds an interval as noisy as this one now needs for a verdict beyond doubt (the spread
        of its rounds' ratios and of its runs kept, the gap to the floor as read): above the floor, to lie wholly
        above it; below, to lie wholly below it and by more than the noise of both measurements (``regressed``).
        Where the verdict is in doubt (the interval reaches across the floor, or lies below it by less than that
        noise) and at most MAX_ROUNDS_TO_TELL would do; else None."""
        now = self.now
        if now is None or now.low >= self.floor or self.regressed:
            return None
        return self._first_telling(MAX_ROUNDS_TO_TELL)

    @property
    def record_keeps_from_telling(self) -> bool:
        """Whether the recorded gain's noise, which rounds now do not shrink, is what leaves ``rounds_to_tell`` None:
        the speedup now lies below the floor, by less than the noise of both measurements, and the rounds now alone
        would lie wholly below it within MAX_ROUNDS_TO_TELL."""
        now = self.now
        if now is None or now.geomean >= self.floor or self.regressed or self.rounds_to_tell is not None:
            return False
        return self._first_telling(MAX_ROUNDS_TO_TELL, record=False) is not None

    def _first_telling(self, most: int, record: bool = True) -> int | None:
        """The fewest rounds, more than now's and at most ``most``, that would tell the speedup now from the floor
        at the spread of its rounds' ratios (``rounds_to_tell``), below it by the noise of both measurements, or
        (``record`` False) of the rounds now alone; None where none would."""
        now = self.now
        gap, spread = abs(math.log(now.geomean / self.floor)), _spread(now)
        below = record and now.geomean < self.floor
        for n in range(now.n + 1, most + 1):
            alone = t95(n - 1) * spread / math.sqrt(n)  # now's own interval, on one side of the floor
            if alone < gap and (not below or _bound(self.before_noise(n, spread)) < gap):
                return n
        return None

    @property
    def verdict(self) -> str:
        """holds: no regression; regressed (``regressed``); not measured: no interval now; or, where its rounds did
        not all run, STOPPED (``unless_stopped``)."""
        if self.now is None:
            measured = "not measured"
        else:
            measured = "regressed" if self.regressed else "holds"
        return unless_stopped(measured, self.stopped)

    @property
    def passed(self) -> bool:
        return self.verdict == "holds"

    @property
    def within_noise(self) -> bool:
        """Whether it holds only within the noise: the verdict holds, but the interval now reaches below the floor
        (the speedup now lies above it, or below it by less than the noise of both measurements), so more rounds
        could yet tell otherwise (``rounds_to_tell``)."""
        return self.verdict == "holds" and self.now.low < self.floor

    @property
    def failed_rounds(self) -> list[int]:
        """The rounds in which a run of the baseline or of the recommendation failed: they pair no ratio, so the
        speedup now (``now``) leaves them out."""
        entries = (self.benchmark.baseline, self.recommended)
        return sorted({index for entry in entries for index, run in enumerate(entry.throughputs, 1) if run is None})

    @property
    def unmeasured(self) -> list[Entry]:
        """The configurations measured in fewer than MIN_ROUNDS rounds, which leave no interval."""
        return [entry for entry in self.benchmark.entries if measured_rounds(entry) < MIN_ROUNDS]

    def to_dict(self) -> dict[str, Any]:
        now = self.now
        return {
            "before": self.before,
            "before_interval": asdict(self.before_interval) if self.before_interval else None,
            "tolerance": self.tolerance,
            "floor": self.floor,
            "now": asdict(now) if now else None,
            "verdict": self.verdict,
            "within_noise": self.within_noise,
            # These two only where it holds within the noise (null, false elsewhere): elsewhere the verdict is clear,
            # or none is given. A loose gate tells a fall within the tuning run's noise from one too close to the floor.
            "rounds_to_tell": self.rounds_to_tell if self.within_noise else None,
            "loose_gate": self.within_noise and self.loose_gate,
            "stopped": self.stopped,
            "before_rounds": self.before_rounds,
            "benchmark": self.benchmark.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        """The record ``to_dict`` wrote, the keys it computes dropped (``without_computed``); TypeError naming a key
        it does not know."""
        written = Check(1.0, 0.0, blank_benchmark()).to_dict()  # the keys are the same whatever the figures
        stored = without_computed(data, written, Check)
        interval = stored.get("before_interval")
        benchmark = Benchmark.from_dict(stored["benchmark"])
        if data.get("stopped"):  # a check.json written before its benchmark kept it
            benchmark = replace(benchmark, stopped=True)
        return cls(
            **{**stored, "benchmark": benchmark, "before_interval": RatioInterval(**interval) if interval else None}
        )


def _bound(parts: list[tuple[float, int]]) -> float:
    """The 95 % bound of a sum of errors, each (standard error, degrees of freedom) of an independent estimate of a
    variance: Welch's t on the combined error, at Welch-Satterthwaite's fractional degrees of freedom, and never below
    a part's own bound. A sum is known no better than any part of it: a better-known part's error, grown, raises
    Welch-Satterthwaite's degrees of freedom, and t falls faster than the sum's error grows, so that without the
    parts' own bounds a noisier measurement would read a tighter bound (and turn a fall that holds into a
    regression)."""
    variance = sum(error**2 for error, _ in parts)
    if variance == 0:
        return 0.0
    df = variance**2 / sum(error**4 / degrees for error, degrees in parts)  # Welch-Satterthwaite
    own = max(t95(degrees) * error for error, degrees in parts)
    return max(own, t95(max(1.0, df)) * math.sqrt(variance))  # df >= its parts' fewest, but for floating point


def _spread(interval: RatioInterval) -> float:
    """The standard deviation of one round's logarithm behind ``interval``, read back from it."""
    return _standard_error(interval) * math.sqrt(interval.n)


def _log_spread(entry: Entry) -> float:
    """The standard deviation of the logarithms of ``entry``'s runs that ran (at least two)."""
    return statistics.stdev(math.log(value) for value in entry.throughputs if value is not None)


def _standard_error(interval: RatioInterval) -> float:
    """The standard error of the mean logarithm behind a 95 % t interval of ``interval.n`` ratios."""
    return math.log(interval.high / interval.low) / (2 * t95(interval.n - 1))


def measured_rounds(entry: Entry) -> int:
    """The rounds in which ``entry`` ran to the end."""
    return sum(value is not None for value in entry.throughputs)
