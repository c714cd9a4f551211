"""Ranking the measured configurations and choosing the one to recommend."""

from __future__ import annotations

from dataclasses import dataclass

from autotune.results.model import StudyResults, TrialRecord


@dataclass(frozen=True)
class Summary:
    """The ranking (fastest first, failed last) and the recommendation against the baseline."""

    ranked: list[TrialRecord]
    baseline: TrialRecord
    recommended: TrialRecord

    @property
    def speedup(self) -> float:
        return self.recommended.throughput / self.baseline.throughput

    @property
    def is_baseline(self) -> bool:
        return self.recommended is self.baseline

    def changed_knobs(self) -> dict[str, tuple[object, object]]:
        """Knobs whose recommended value differs from the baseline: name → (before, after)."""
        before, after = self.baseline.result.knobs, self.recommended.result.knobs
        return {name: (before[name], after[name]) for name in before if before[name] != after[name]}


def summarise(results: StudyResults) -> Summary:
    """Rank every record; recommend the fastest, which is the baseline unless a trial beat it.

    Ties go to the baseline, then to the earlier trial, so a recommendation is never a change
    that measured no faster.
    """
    if results.baseline is None or not results.baseline.result.ok:
        raise ValueError("a summary needs a measured baseline")
    measured = [r for r in results.records if r.result.ok]
    failed = [r for r in results.records if not r.result.ok]
    ranked = sorted(measured, key=lambda r: -r.throughput) + failed
    return Summary(ranked=ranked, baseline=results.baseline, recommended=ranked[0])
