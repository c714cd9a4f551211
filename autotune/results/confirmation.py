"""Re-measuring the best trial against the baseline before recommending it."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Confirmation:
    """Throughputs of the best trial's configuration and the baseline, measured alternately in fresh
    processes (baseline, candidate, baseline, candidate, ...) after tuning.

    The candidate is confirmed when it beat the baseline in every round and the ratio of medians is at
    least ``MIN_GAIN`` above 1: a single lucky run cannot make a slower setup the recommendation.
    """

    MIN_GAIN: ClassVar[float] = 0.02

    candidate: str
    candidate_knobs: dict[str, Any]
    baseline_throughputs: list[float]
    candidate_throughputs: list[float]
    failure: str | None = None

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_throughputs)

    @property
    def candidate_median(self) -> float:
        return statistics.median(self.candidate_throughputs)

    @property
    def speedup(self) -> float:
        return self.candidate_median / self.baseline_median

    @property
    def confirmed(self) -> bool:
        if self.failure or not self.candidate_throughputs:
            return False
        pairs = zip(self.candidate_throughputs, self.baseline_throughputs, strict=True)
        return all(c > b for c, b in pairs) and self.speedup >= 1 + self.MIN_GAIN

    def describe(self) -> str:
        """One sentence for reports."""
        if self.failure:
            return f"Re-measuring trial {self.candidate} against the baseline failed ({self.failure})."
        runs = len(self.candidate_throughputs)
        pairs = zip(self.candidate_throughputs, self.baseline_throughputs, strict=True)
        figures = ", ".join(f"{c:.1f}/{b:.1f}" for c, b in pairs)
        verdict = "confirmed" if self.confirmed else "not confirmed"
        return (
            f"Trial {self.candidate} re-measured against the baseline in {runs} interleaved rounds of fresh processes "
            f"(candidate/baseline samples/s: {figures}): median {self.speedup:.2f}x, {verdict} (needs a win in every "
            f"round and at least {self.MIN_GAIN:.0%} gain)."
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        return cls(**data)
