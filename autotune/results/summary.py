"""Ranking the measured configurations and choosing the one to recommend."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.records import TrialRecord
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation, choose_candidate, select_finalists


@dataclass(frozen=True)
class Summary:
    """The ranking (fastest first, failed last) and the recommendation against the baseline.

    ``confirmation`` is the re-measurement of the finalists, when one was made; where it confirmed the
    recommendation, the throughputs and speedup are its medians rather than single runs. ``batch_policy`` is the
    study's (``accumulation_steps``).
    """

    ranked: list[TrialRecord]
    baseline: TrialRecord
    recommended: TrialRecord
    confirmation: Confirmation | None = None
    pareto: list[TrialRecord] = field(default_factory=list)
    batch_policy: str = "free"

    @property
    def confirmed(self) -> bool:
        return self.confirmation is not None and self.confirmation.confirmed and not self.is_baseline

    @property
    def recommended_throughput(self) -> float:
        return self.confirmation.winner.median if self.confirmed else self.recommended.throughput

    @property
    def baseline_throughput(self) -> float:
        return self.confirmation.baseline_median if self.confirmed else self.baseline.throughput

    @property
    def throughput_basis(self) -> str:
        """Where the two throughputs above come from, in words."""
        if self.confirmed and self.confirmation.rounds == 1:
            return "one interleaved re-measurement"
        if self.confirmed:
            return f"medians of {self.confirmation.rounds} interleaved re-measurements"
        return "single measurements"

    @property
    def speedup(self) -> float:
        return self.recommended_throughput / self.baseline_throughput

    @property
    def is_baseline(self) -> bool:
        return self.recommended is self.baseline

    def accumulation_steps(self, record: TrialRecord) -> int:
        """The micro-batches per optimizer step ``record`` trained with: under batch_policy "fixed_effective" its
        batch is a micro-batch of the baseline's batch, else every batch is a step."""
        if self.batch_policy != "fixed_effective":
            return 1
        return self.baseline.result.knobs["batch_size"] // record.result.knobs["batch_size"]

    def changed_knobs(self) -> dict[str, tuple[object, object]]:
        """Knobs whose recommended value differs from the baseline: name → (before, after)."""
        before, after = self.baseline.result.knobs, self.recommended.result.knobs
        return {name: (before[name], after[name]) for name in before if before[name] != after[name]}


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
    """Rank every record (fastest first; pruned, infeasible and failed last) and recommend: the winner of the
    confirmation when the finalists were re-measured (the baseline when none won), else the candidate chosen
    from single runs (``choose_candidate``). A recommendation is never a change that re-measured no faster.
    """
    if results.baseline is None or not results.baseline.result.ok:
        raise ValueError("a summary needs a measured baseline")
    measured = [r for r in results.records if r.result.ok]
    failed = [r for r in results.records if not r.result.ok]
    ranked = sorted(measured, key=lambda r: -r.throughput) + failed
    confirmation = results.confirmation
    finalists = [r.label for r in select_finalists(results.baseline, results.trials)]
    if confirmation is not None and not confirmation.is_about(finalists):
        confirmation = None  # about the finalists of fewer trials: stale
    if confirmation is None:
        recommended = choose_candidate(results.baseline, results.trials) or results.baseline
    else:
        winner = confirmation.winner
        recommended = next(r for r in results.trials if r.label == winner.label) if winner else results.baseline
    pareto = pareto_front(results.records) if "peak_memory" in results.objectives else []
    return Summary(ranked, results.baseline, recommended, confirmation, pareto, results.batch_policy)
