"""Re-measuring the finalists against the baseline, and against each other, before recommending one."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

# A finalist counts as faster than another only when it beat it in every round and by this fraction by medians:
# about one run's noise on a quiet machine (docs/benchmarks.md: CV 4.7 % for one run, 2.1 % for the median of
# three). Otherwise the two are tied within noise, and the simpler, then the leaner, is recommended.
TIE_TOLERANCE = 0.03


@dataclass
class Finalist:
    """A configuration re-measured in the confirmation race. ``changes`` counts the knobs it changes from the
    baseline; ``throughputs`` holds one run per round it took part in; ``dropped`` says why it left early."""

    label: str
    knobs: dict[str, Any]
    changes: int
    peak_memory_mb: float
    throughputs: list[float] = field(default_factory=list)
    dropped: str | None = None

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


@dataclass(frozen=True)
class Confirmation:
    """The finalists (the fastest trials, and the simplest one tied with the fastest) and the baseline,
    measured in rounds of fresh processes after tuning: each round the baseline and every finalist still in the
    race, in an order that rotates from round to round.

    A finalist is proven when it beat the baseline in every round and the ratio of medians is at least
    ``MIN_GAIN`` above 1. Among proven finalists, the fastest by median is the leader; those it does not beat
    beyond noise (in every round, and by ``TIE_TOLERANCE`` by medians) are tied with it, and of the tied the one
    that changes fewest knobs wins, then the one using least memory. No winner means: keep the baseline. A single
    lucky run can make neither a slower setup the recommendation nor one finalist look faster than another.
    ``failure`` is set when a baseline run failed, which ends the race without a winner. ``planned_rounds`` is
    how many rounds were asked for; a race that was decided earlier ran fewer.
    """

    MIN_GAIN: ClassVar[float] = 0.02

    baseline_throughputs: list[float]
    finalists: list[Finalist]
    failure: str | None = None
    planned_rounds: int | None = None

    @property
    def rounds(self) -> int:
        return len(self.baseline_throughputs)

    def is_about(self, labels: list[str]) -> bool:
        """Whether these finalists are exactly the trials ``labels``, in order (else the race is stale)."""
        return [f.label for f in self.finalists] == labels

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_throughputs)

    def proven(self, finalist: Finalist) -> bool:
        """Whether ``finalist`` beat the baseline in every round, by ``MIN_GAIN`` overall."""
        if self.failure or finalist.dropped or not self.rounds or len(finalist.throughputs) != self.rounds:
            return False
        pairs = zip(finalist.throughputs, self.baseline_throughputs, strict=True)
        return all(f > b for f, b in pairs) and finalist.median >= self.baseline_median * (1 + self.MIN_GAIN)

    @property
    def winner(self) -> Finalist | None:
        proven = [f for f in self.finalists if self.proven(f)]
        if not proven:
            return None
        leader = max(proven, key=lambda f: f.median)
        tied = [f for f in proven if not _beats(leader, f)]
        return min(tied, key=lambda f: (f.changes, f.peak_memory_mb, -f.median))

    @property
    def confirmed(self) -> bool:
        return self.winner is not None

    @property
    def leader(self) -> Finalist | None:
        """The winner or, without one, the finalist with the highest median (for saying how close it came)."""
        measured = [f for f in self.finalists if f.throughputs]
        return self.winner or max(measured, key=lambda f: f.median, default=None)

    @property
    def speedup(self) -> float | None:
        """The leader's median over the baseline's; None when nothing was re-measured."""
        leader = self.leader
        if leader is None or not self.rounds:
            return None
        return leader.median / self.baseline_median

    def describe(self) -> str:
        """One paragraph for reports."""
        rounds = ", ".join(f"{value:.1f}" for value in self.baseline_throughputs) or "none"
        planned = f" of {self.planned_rounds} planned" if (self.planned_rounds or 0) > self.rounds else ""
        parts = [
            f"{len(self.finalists)} finalist(s) re-measured against the baseline in {self.rounds}{planned} interleaved "
            f"rounds of fresh processes (samples/s per round). Baseline: {rounds}."
        ]
        if planned and self.winner and not self.failure:
            parts.append("The race was decided early: more rounds could not change the verdict beyond run noise.")
        for finalist in self.finalists:
            runs = ", ".join(f"{value:.1f}" for value in finalist.throughputs) or "none"
            ratio = f" (median {finalist.median / self.baseline_median:.2f}x)" if finalist.throughputs else ""
            left = f", dropped: {finalist.dropped}" if finalist.dropped else ""
            parts.append(f"Trial {finalist.label}: {runs}{ratio}{left}.")
        if self.failure:
            parts.append(f"Re-measuring the baseline failed ({self.failure}), so nothing is recommended over it.")
        elif self.winner:
            parts.append(
                f"Trial {self.winner.label} is confirmed: {self.speedup:.2f}x by medians (a win in every round and "
                f"at least {self.MIN_GAIN:.0%} gain; of the finalists the fastest did not beat in every round and by "
                f"{TIE_TOLERANCE:.0%}, the one with fewest changes, then least memory)."
            )
        else:
            parts.append(f"No finalist won every round by at least {self.MIN_GAIN:.0%}, so the baseline is kept.")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        finalists = [Finalist(**finalist) for finalist in data["finalists"]]
        return cls(data["baseline_throughputs"], finalists, data.get("failure"), data.get("planned_rounds"))


def _beats(faster: Finalist, other: Finalist) -> bool:
    """Whether ``faster`` is faster than ``other`` beyond noise: it won every round they both ran, and by
    TIE_TOLERANCE by medians."""
    rounds = zip(faster.throughputs, other.throughputs, strict=True)
    return all(a > b for a, b in rounds) and faster.median > other.median * (1 + TIE_TOLERANCE)
