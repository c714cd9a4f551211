"""What ``mode=check`` measured: a tuning run's recommendation against the baseline again, and whether its speedup held.

Its rule is written here once (``Check.regressed``): the speedup now is the geometric mean of the recommendation's
per-round ratios to the baseline, with its 95 % interval (``Benchmark.interval``); it regressed when that interval's
upper bound lies below the speedup the tuning run recorded less the tolerance. A check passes only when there is an
interval and it reaches that floor.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from autotune.measure.stats import RatioInterval
from autotune.results.benchmark import Benchmark, Entry

# Rounds an interval needs: each of the two configurations measured, and both in the same rounds (ratio_interval).
MIN_ROUNDS = 2
# holds: the interval reaches the floor; regressed: it lies below it; not measured: no interval.
VERDICTS = ("holds", "regressed", "not measured")


@dataclass(frozen=True)
class Check:
    """A check of a recommendation whose tuning run recorded the speedup ``before`` over the baseline, measured again
    in ``benchmark`` (its entries: the baseline, then the recommendation; ``benchmark.recommended``: the report.json's
    path), allowed to fall by ``tolerance`` (a fraction of ``before``) beyond the measured noise."""

    before: float
    tolerance: float
    benchmark: Benchmark

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
        ``before * (1 - tolerance)``, so that even the fastest the noise allows has fallen beyond the tolerance. A fall
        the noise could explain is no regression; without an interval there is no verdict (``verdict``: not
        measured, which fails the check as well)."""
        now = self.now
        return now is not None and now.high < self.floor

    @property
    def verdict(self) -> str:
        """One of VERDICTS."""
        if self.now is None:
            return "not measured"
        return "regressed" if self.regressed else "holds"

    @property
    def passed(self) -> bool:
        return self.verdict == "holds"

    @property
    def unmeasured(self) -> list[Entry]:
        """The configurations measured in fewer than MIN_ROUNDS rounds, which leave no interval."""
        return [entry for entry in self.benchmark.entries if measured_rounds(entry) < MIN_ROUNDS]

    def to_dict(self) -> dict[str, Any]:
        now = self.now
        return {
            "before": self.before,
            "tolerance": self.tolerance,
            "floor": self.floor,
            "now": asdict(now) if now else None,
            "verdict": self.verdict,
            "benchmark": self.benchmark.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Check:
        return cls(data["before"], data["tolerance"], Benchmark.from_dict(data["benchmark"]))


def measured_rounds(entry: Entry) -> int:
    """The rounds in which ``entry`` ran to the end."""
    return sum(value is not None for value in entry.throughputs)
