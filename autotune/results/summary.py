"""Ranking the measured configurations and choosing the one to recommend."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.results.confirmation import Confirmation
from autotune.results.model import StudyResults, TrialRecord


@dataclass(frozen=True)
class Summary:
    """The ranking (fastest first, failed last) and the recommendation against the baseline.

    ``confirmation`` is the re-measurement of the fastest trial, when one was made; where it confirmed
    the recommendation, the throughputs and speedup are its medians rather than single runs.
    """

    ranked: list[TrialRecord]
    baseline: TrialRecord
    recommended: TrialRecord
    confirmation: Confirmation | None = None
    pareto: list[TrialRecord] = field(default_factory=list)

    @property
    def confirmed(self) -> bool:
        return self.confirmation is not None and self.confirmation.confirmed and not self.is_baseline

    @property
    def recommended_throughput(self) -> float:
        return self.confirmation.candidate_median if self.confirmed else self.recommended.throughput

    @property
    def baseline_throughput(self) -> float:
        return self.confirmation.baseline_median if self.confirmed else self.baseline.throughput

    @property
    def speedup(self) -> float:
        return self.recommended_throughput / self.baseline_throughput

    @property
    def is_baseline(self) -> bool:
        return self.recommended is self.baseline

    def changed_knobs(self) -> dict[str, tuple[object, object]]:
        """Knobs whose recommended value differs from the baseline: name → (before, after)."""
        before, after = self.baseline.result.knobs, self.recommended.result.knobs
        return {name: (before[name], after[name]) for name in before if before[name] != after[name]}


# Trials within this fraction of the fastest count as tied with it: about one run's noise on a quiet machine
# (docs/benchmarks.md: CV 4.7 % for one run, 2.1 % for the median of three), so a tie-break costs at most 3 %.
TIE_TOLERANCE = 0.03


def choose_candidate(results: StudyResults) -> TrialRecord | None:
    """The trial to recommend over the baseline, or None when the baseline is as good.

    Among the measured configurations within TIE_TOLERANCE of the fastest (the baseline included),
    the one that changes fewest knobs from the baseline wins, then the one with the lowest peak memory:
    a tie within noise is no reason to change more than needed.
    """
    if results.baseline is None:
        return None
    measured = [r for r in results.records if r.result.ok]
    if not measured:
        return None
    fastest = max(r.throughput for r in measured)
    tied = [r for r in measured if r.throughput >= fastest * (1 - TIE_TOLERANCE)]
    base_knobs = results.baseline.result.knobs
    chosen = min(tied, key=lambda r: (_changes(r.result.knobs, base_knobs), r.result.peak_memory_mb, -r.throughput))
    return None if chosen is results.baseline else chosen


def pareto_front(records: list[TrialRecord]) -> list[TrialRecord]:
    """Measured records no other beats on both throughput (higher) and peak memory (lower), fastest first."""
    measured = [r for r in records if r.result.ok]

    def dominated(r: TrialRecord) -> bool:
        return any(
            o.throughput >= r.throughput
            and o.result.peak_memory_mb <= r.result.peak_memory_mb
            and (o.throughput > r.throughput or o.result.peak_memory_mb < r.result.peak_memory_mb)
            for o in measured
        )

    return sorted((r for r in measured if not dominated(r)), key=lambda r: -r.throughput)


def summarise(results: StudyResults) -> Summary:
    """Rank every record (fastest first; pruned, infeasible and failed last) and recommend the chosen
    candidate (``choose_candidate``) where, if it was re-measured, the re-measurement confirmed it;
    otherwise the baseline, so a recommendation is never a change that measured no faster.
    """
    if results.baseline is None or not results.baseline.result.ok:
        raise ValueError("a summary needs a measured baseline")
    measured = [r for r in results.records if r.result.ok]
    failed = [r for r in results.records if not r.result.ok]
    ranked = sorted(measured, key=lambda r: -r.throughput) + failed
    candidate = choose_candidate(results)
    confirmation = results.confirmation
    if confirmation is not None and (candidate is None or confirmation.candidate != candidate.label):
        confirmation = None  # about an earlier candidate: stale
    recommended = candidate or results.baseline
    if confirmation is not None and not confirmation.confirmed:
        recommended = results.baseline
    pareto = pareto_front(results.records) if "peak_memory" in results.objectives else []
    return Summary(ranked, results.baseline, recommended, confirmation, pareto)


def _changes(knobs: dict[str, object], baseline: dict[str, object]) -> int:
    return sum(1 for name, value in knobs.items() if baseline.get(name) != value)
