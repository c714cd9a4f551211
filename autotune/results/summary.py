"""Ranking the measured configurations and choosing the one to recommend."""

from __future__ import annotations

from dataclasses import dataclass

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


def summarise(results: StudyResults) -> Summary:
    """Rank every record; recommend the fastest, which is the baseline unless a trial beat it and,
    where it was re-measured, the re-measurement confirmed it.

    Ties go to the baseline, then to the earlier trial, so a recommendation is never a change
    that measured no faster.
    """
    if results.baseline is None or not results.baseline.result.ok:
        raise ValueError("a summary needs a measured baseline")
    measured = [r for r in results.records if r.result.ok]
    failed = [r for r in results.records if not r.result.ok]
    ranked = sorted(measured, key=lambda r: -r.throughput) + failed
    confirmation = results.confirmation
    if confirmation is not None and confirmation.candidate != ranked[0].label:
        confirmation = None  # about an earlier fastest trial: stale
    recommended = ranked[0]
    if confirmation is not None and not confirmation.confirmed:
        recommended = results.baseline
    return Summary(ranked=ranked, baseline=results.baseline, recommended=recommended, confirmation=confirmation)
