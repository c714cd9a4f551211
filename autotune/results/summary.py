"""Ranking the measured configurations and choosing the one to recommend."""

from __future__ import annotations

from dataclasses import dataclass, field

from autotune.results.confirmation import TIE_TOLERANCE, Confirmation
from autotune.results.model import StudyResults, TrialRecord

# Trials whose single run came within this fraction of the fastest are worth re-measuring: single runs of one
# configuration in fresh processes vary with a CV of 6-18 % here (docs/benchmarks.md), and a configuration the
# tuner recommended in two other runs read 12 % below the fastest in one screening run, so the fastest single run
# may not be the fastest. One that really is slower costs one race run: after round 1 the race drops finalists
# 10 % behind the leader.
FINALIST_WINDOW = 0.15


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
    base = results.baseline.result.knobs
    chosen = min(tied, key=lambda r: (count_changes(r.result.knobs, base), r.result.peak_memory_mb, -r.throughput))
    return None if chosen is results.baseline else chosen


def select_finalists(results: StudyResults, limit: int = 3) -> list[TrialRecord]:
    """The trials worth re-measuring before recommending one: those whose single run beat the baseline's and
    came within FINALIST_WINDOW of the fastest, fastest first, at most ``limit``; the simplest one tied with
    the fastest (``choose_candidate``) is always among them.

    Left out: a trial that changes more knobs than another of them and whose run did not beat that one's by
    TIE_TOLERANCE. The race's tie rule could recommend it only if it beat the simpler one by that much in every
    round, and its own run already did not; racing it would cost a run per round (a compiled one, its compile).
    """
    if results.baseline is None or not results.baseline.result.ok:
        return []
    measured = [r for r in results.trials if r.result.ok and r.throughput > results.baseline.throughput]
    if not measured:
        return []
    fastest = max(r.throughput for r in measured)
    near = [r for r in measured if r.throughput >= fastest * (1 - FINALIST_WINDOW)]
    base = results.baseline.result.knobs
    worth = sorted((r for r in near if not _outdone_by_simpler(r, near, base)), key=lambda r: -r.throughput)
    simplest = choose_candidate(results)
    finalists = worth[:limit]
    if simplest in worth and simplest not in finalists:
        finalists = [*finalists[: limit - 1], simplest]
    return finalists


def _outdone_by_simpler(record: TrialRecord, others: list[TrialRecord], base: dict[str, object]) -> bool:
    changes = count_changes(record.result.knobs, base)
    simpler = [other for other in others if count_changes(other.result.knobs, base) < changes]
    return any(record.throughput <= other.throughput * (1 + TIE_TOLERANCE) for other in simpler)


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
    if confirmation is not None and not confirmation.is_about([r.label for r in select_finalists(results)]):
        confirmation = None  # about the finalists of fewer trials: stale
    if confirmation is None:
        recommended = choose_candidate(results) or results.baseline
    else:
        winner = confirmation.winner
        recommended = next(r for r in results.trials if r.label == winner.label) if winner else results.baseline
    pareto = pareto_front(results.records) if "peak_memory" in results.objectives else []
    return Summary(ranked, results.baseline, recommended, confirmation, pareto, results.batch_policy)


def count_changes(knobs: dict[str, object], baseline: dict[str, object]) -> int:
    """How many knobs ``knobs`` sets differently from ``baseline``."""
    return sum(1 for name, value in knobs.items() if baseline.get(name) != value)
