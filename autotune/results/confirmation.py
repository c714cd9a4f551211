"""Re-measuring the finalists against the baseline, and against each other, before recommending one."""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

# A finalist counts as faster than another only when it won most of the rounds against it and the geometric mean
# of its per-round ratios to the other's runs exceeds 1 by this fraction: about one run's noise on a quiet machine
# (docs/benchmarks.md: CV 4.7 % for one run, 2.1 % for the median of three). Otherwise the two are tied within
# noise, and the simpler, then the leaner, is recommended. Winning most rounds keeps one lucky run from deciding
# (with 2 rounds it means both); the paired estimate sharpens with every round, where "won every round" would
# grow stricter instead (docs/benchmarks.md, "The race's rules against a model of the noise").
TIE_TOLERANCE = 0.03
# A finalist is proven against the baseline only if it won so many of the rounds that a configuration no faster
# than the baseline would do so by chance at most this often (a one-sided sign test): 1/8, which is winning all of
# 3 rounds (the default), all of 4 or 5, 5 of 6, 8 of 10. With 1 or 2 rounds it must win them all.
PROOF_LEVEL = 0.125


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

    A finalist is proven when it beat the baseline in enough rounds (``wins_needed``: every round of up to 5) and
    the ratio of medians is at least ``MIN_GAIN`` above 1. Among proven finalists, the fastest by median is the
    leader; those it does not beat beyond noise (``beats``: most rounds, and ``TIE_TOLERANCE`` round by round) are
    tied with it, and of the tied the one that changes fewest knobs wins, then the one using least memory. No
    winner means: keep the baseline. A single
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
        """Whether ``finalist`` beat the baseline in enough rounds (``wins_needed``) and by ``MIN_GAIN`` by medians."""
        if self.failure or finalist.dropped or not self.rounds or len(finalist.throughputs) != self.rounds:
            return False
        wins = sum(f > b for f, b in zip(finalist.throughputs, self.baseline_throughputs, strict=True))
        return wins >= wins_needed(self.rounds) and finalist.median >= self.baseline_median * (1 + self.MIN_GAIN)

    @property
    def winner(self) -> Finalist | None:
        proven = [f for f in self.finalists if self.proven(f)]
        if not proven:
            return None
        leader = max(proven, key=lambda f: f.median)
        tied = [f for f in proven if not beats(leader, f)]
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
        wins = _wins_in_words(self.rounds)
        if self.failure:
            parts.append(f"Re-measuring the baseline failed ({self.failure}), so nothing is recommended over it.")
        elif self.winner:
            parts.append(
                f"Trial {self.winner.label} is confirmed: {self.speedup:.2f}x by medians (a win in {wins} and at "
                f"least {self.MIN_GAIN:.0%} gain; of the finalists the fastest did not beat in most rounds and by more "
                f"than {TIE_TOLERANCE:.0%} round by round, the one with fewest changes, then least memory)."
            )
        else:
            parts.append(f"No finalist won {wins} with at least {self.MIN_GAIN:.0%} gain, so the baseline is kept.")
        return " ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        finalists = [Finalist(**finalist) for finalist in data["finalists"]]
        return cls(data["baseline_throughputs"], finalists, data.get("failure"), data.get("planned_rounds"))


def beats(faster: Finalist, other: Finalist) -> bool:
    """Whether ``faster`` is faster than ``other`` beyond noise: it won more than half of the rounds they both ran,
    and by more than TIE_TOLERANCE by the geometric mean of their per-round ratios."""
    pairs = list(zip(faster.throughputs, other.throughputs, strict=False))
    won = sum(a > b for a, b in pairs)
    return won > len(pairs) / 2 and paired_ratio(faster.throughputs, other.throughputs) > 1 + TIE_TOLERANCE


def paired_ratio(runs: list[float], others: list[float]) -> float:
    """The geometric mean of the per-round ratios ``runs[i] / others[i]`` (over the rounds both ran)."""
    pairs = list(zip(runs, others, strict=False))
    return math.exp(statistics.fmean(math.log(a / b) for a, b in pairs))


def wins_needed(rounds: int) -> int:
    """How many of ``rounds`` rounds a finalist must win against the baseline to be proven: the fewest that one no
    faster would win with probability at most PROOF_LEVEL, or all of them where even all would not do (1-2 rounds)."""
    for wins in range(rounds + 1):
        if sum(math.comb(rounds, k) for k in range(wins, rounds + 1)) / 2**rounds <= PROOF_LEVEL:
            return wins
    return rounds


def _wins_in_words(rounds: int) -> str:
    needed = wins_needed(rounds)
    return "every round" if needed == rounds else f"at least {needed} of {rounds} rounds"
