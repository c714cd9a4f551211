"""The finalists' race's record and verdict (``Confirmation``): which finalist is proven and which won (the proof
and the winner's rule are written here), and why, in words. The rules of who races and who leaves, and an overview of
the race, are ``autotune/results/race_rules.py``'s."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from autotune.records import TrialRecord
from autotune.results.finalist import Finalist, Left, record_fields, run_suffix, unread_memories
from autotune.results.race_rules import (
    BEATS_WORDS,
    MIN_GAIN,
    beats,
    rounds_lost,
    select_finalists,
    unprovable,
    why_not_beaten,
    wins_in_words,
    wins_needed,
)
from autotune.trial.result import Disturbance
from autotune.words import counted


@dataclass(frozen=True)
class Confirmation:
    """The finalists (the fastest trials, and the simplest one tied with the fastest) and the baseline,
    measured in rounds of processes of their own after tuning: each round the baseline and every finalist still in the
    race, in an order that rotates from round to round.

    A finalist is proven when it beat the baseline in enough rounds (``wins_needed``: every round of up to 5) and
    the ratio of medians is at least ``MIN_GAIN`` above 1. Among proven finalists no other proven one beats, the
    fastest by median is the leader; those it does not beat beyond noise (``beats``: most rounds, and by
    ``TIE_TOLERANCE`` by the geometric mean of the per-round ratios) are tied with it, and of the tied the one that
    changes fewest knobs wins, then the one using least memory. No winner means: keep the baseline. A single
    lucky run can make neither a slower setup the recommendation nor one finalist look faster than another.
    ``failure`` is set when a baseline run failed, which ends the race without a winner. ``planned_rounds`` is
    how many rounds were asked for; a trim race every variant left ran fewer (``ended_early``), as did a finalists'
    race ended at its verdict for the trim to race its winner (``trim.trim_ahead``), and so did one
    ``cut`` short by study.budget_s (it proves only by the wins its planned rounds need: ``proof_rounds``) or by a
    stopped run (stored round by round: the summary takes no verdict from it, and a later run goes on from its
    rounds). ``disturbed`` names the runs it counted though something beside them slowed them
    (``autotune/study/disturbed.py``), and how. ``trials``:
    the labels of the measured trials it was about (None in a race stored before they were kept). ``decided_after``:
    the round after which its verdict was in (``decided``); the rounds after it, of its winner and the baseline
    alone, give the gain the interval of the planned rounds: the winner's proof is the rounds won up to the verdict,
    but rounds after it that pull its median under ``MIN_GAIN`` take the proof back, as a failed run does.
    ``baseline_peak_memories``: each baseline run's peak memory, as ``Finalist.peak_memories`` keeps a finalist's.
    """

    baseline_throughputs: list[float]
    finalists: list[Finalist]
    failure: str | None = None
    planned_rounds: int | None = None
    cut: bool = False
    disturbed: dict[str, Disturbance] = field(default_factory=dict)
    trials: list[str] | None = None
    decided_after: int | None = None
    baseline_peak_memories: list[float | None] = field(default_factory=list)

    @property
    def rounds(self) -> int:
        return len(self.baseline_throughputs)

    def is_current(self, baseline: TrialRecord, trials: list[TrialRecord]) -> bool:
        """Whether the race stands for ``trials``: the measured trials it was about are theirs, or (no trial measured
        since, or a race stored before they were kept) its finalists are those they give (else it is stale)."""
        measured = sorted(record.label for record in trials if record.result.ok)
        if self.trials is not None and sorted(self.trials) == measured:
            return True
        return [f.label for f in self.finalists] == [r.label for r in select_finalists(baseline, trials)]

    def slowed_rounds(self, label: str | None) -> set[int]:
        """The rounds in which the race counted a run of ``label`` (None: the baseline) though something beside it
        slowed it."""
        return set(self.disturbances(label))

    def disturbances(self, label: str | None) -> dict[int, Disturbance]:
        """What slowed each run of ``label`` (None: the baseline) the race counted though something beside it slowed
        it, by round (its name: RACE-ROUND, then ``label``'s suffix)."""
        ends = run_suffix(label)
        return {
            int(name.removesuffix(ends).rsplit("-", 1)[1]): slowed
            for name, slowed in self.disturbed.items()
            if name.endswith(ends)
        }

    @property
    def baseline_median(self) -> float:
        return statistics.median(self.baseline_throughputs)

    def paired(self, finalist: Finalist) -> tuple[list[float], list[float]]:
        """``finalist``'s runs and the baseline's, of the rounds both ran: every figure of the race pairs its runs by
        round. A finalist that left ran the first rounds; one that ran before the baseline in the round whose
        baseline run failed (the order rotates) holds a run of a round the baseline never ran, which no figure
        counts."""
        both = min(len(finalist.throughputs), self.rounds)
        return finalist.throughputs[:both], self.baseline_throughputs[:both]

    def paired_median(self, finalist: Finalist) -> float | None:
        """``finalist``'s median over the rounds the baseline ran too (``paired``); None where there is none."""
        runs, _ = self.paired(finalist)
        return statistics.median(runs) if runs else None

    def proven(self, finalist: Finalist) -> bool:
        """Whether ``finalist`` ran every round, beat the baseline in enough of those up to the verdict
        (``wins_needed``; ``decided_after``, else all) and by ``MIN_GAIN`` by their medians, and by ``MIN_GAIN`` by
        the medians of every round too: rounds after a verdict that lost what it rested on leave no proof
        (``shortfall`` says what it missed)."""
        return self.shortfall(finalist) is None

    def shortfall(self, finalist: Finalist) -> str | None:
        """What keeps ``finalist`` from being proven (``proven``), in words; None where nothing does."""
        missed = self._verdict_shortfall(finalist)
        if missed is not None or self.ratio(finalist) >= 1 + MIN_GAIN:
            return missed
        return (
            f"it won the rounds up to the verdict (round {self.verdict_rounds}), but the rounds after it put its "
            f"median over all {self.rounds} at {self.ratio(finalist):.2f}x, under the {MIN_GAIN:.0%} a change must gain"
        )

    def faded(self, finalist: Finalist) -> bool:
        """Whether ``finalist`` was proven by the rounds up to the verdict and not by every round (``shortfall``)."""
        return self._verdict_shortfall(finalist) is None and not self.proven(finalist)

    def _verdict_shortfall(self, finalist: Finalist) -> str | None:
        """What keeps ``finalist`` from being proven by the rounds up to the verdict, in words; None where nothing."""
        if self.failure:
            return f"a baseline run failed ({self.failure})"
        if finalist.dropped:
            return f"it left the race ({finalist.dropped})"
        if not self.rounds or len(finalist.throughputs) != self.rounds:
            return "it did not run every round"
        proving, upto = self.verdict_rounds, " up to the verdict" if self.decided_after else ""
        runs, base = finalist.throughputs[:proving], self.baseline_throughputs[:proving]
        wins, needed = sum(f > b for f, b in zip(runs, base, strict=True)), wins_needed(self.proof_rounds)
        if wins < needed and self.proof_rounds > proving:
            return (
                f"it won {wins} of the {counted(proving, 'round')} it ran before the race was cut short "
                f"(study.budget_s, or a stopped run), where a proof over the {self.proof_rounds} planned needs {needed}"
            )
        if wins < needed:
            return f"it won {wins} of the {counted(proving, 'round')}{upto}, where {needed} are needed"
        ratio = statistics.median(runs) / statistics.median(base)
        if ratio < 1 + MIN_GAIN:
            return f"it read {ratio:.2f}x by medians of the rounds{upto}, under the {MIN_GAIN:.0%} a change must gain"
        return None

    @property
    def verdict_rounds(self) -> int:
        """The rounds the verdict rests on: those up to ``decided_after``, else all."""
        return self.decided_after or self.rounds

    @property
    def proof_rounds(self) -> int:
        """The rounds whose ``wins_needed`` a proof takes: those the verdict rests on (``verdict_rounds``), but in a
        race ``cut`` short before its verdict (study.budget_s, a stopped run), those it planned: the rounds it ran
        prove only what the planned race would, so that a budget that leaves one round proves nothing by it (one
        round's ``wins_needed`` is 1). A race decided early (``decided``) rests on its verdict, cut or not."""
        if self.cut and self.decided_after is None and self.planned_rounds:
            return max(self.planned_rounds, self.rounds)
        return self.verdict_rounds

    def short_of_rounds(self, finalist: Finalist) -> bool:
        """Whether the race was cut short before it could prove ``finalist`` (``proof_rounds``): it ran every round,
        read MIN_GAIN faster by medians and lost no more rounds to the baseline than a proof over the planned rounds
        allows, but won fewer than that proof needs: only the rounds left out stand between it and a proof, so the
        race says nothing of it against the baseline yet (``measured_rounds``)."""
        if self.proof_rounds == self.verdict_rounds or self.failure or finalist.dropped:
            return False
        if not self.rounds or len(finalist.throughputs) != self.rounds or self.ratio(finalist) < 1 + MIN_GAIN:
            return False
        base, needed = self.baseline_throughputs, wins_needed(self.proof_rounds)
        return self.rounds - rounds_lost(finalist, base) < needed and not unprovable(finalist, base, self.proof_rounds)

    @property
    def winner(self) -> Finalist | None:
        ranking = self._fastest_proven()
        if ranking is None:
            return None
        _, tied = ranking
        return min(tied, key=lambda f: (f.changes, f.peak_memory_mb, -f.median))

    def _fastest_proven(self) -> tuple[Finalist, list[Finalist]] | None:
        """The proven finalist no other proven one beats with the highest median, and those tied with it (itself
        included); None where none is proven."""
        proven = [f for f in self.finalists if self.proven(f)]
        if not proven:
            return None
        # A median and the rounds won may disagree: one another proven finalist beats is not the leader.
        unbeaten = [f for f in proven if not any(beats(other, f) for other in proven)] or proven
        fastest = max(unbeaten, key=lambda f: f.median)
        return fastest, [f for f in unbeaten if not beats(fastest, f)]

    @property
    def confirmed(self) -> bool:
        return self.winner is not None

    def why_won(self) -> str:
        """Why the winner won, in words: the fastest by median, or tied within noise with it (``beats``) and
        changing fewer knobs, or as many and using less memory; nothing where it was the only one proven."""
        winner = self.winner
        fastest, tied = self._fastest_proven()
        proven = [f for f in self.finalists if self.proven(f)]
        if winner is fastest:
            higher = [f for f in proven if f.median > winner.median]
            if higher:
                return _outrun(winner, higher, proven)
            if rival := next((f for f in tied if f is not winner), None):  # chosen among those tied with it
                missed = why_not_beaten(winner, rival)
                return f"tied within noise with trial {rival.label} ({missed}); this one {_chosen_over(winner, rival)}"
            return "the fastest by median of those proven" if len(proven) > 1 else ""
        missed = why_not_beaten(fastest, winner)
        tied = f"trial {fastest.label} read a higher median but did not beat it beyond noise ({missed}), and "
        return tied + f"this one {_chosen_over(winner, fastest)}"

    @property
    def leader(self) -> Finalist | None:
        """The winner or, without one, the finalist with the highest median of the rounds the baseline ran too
        (``paired_median``; for saying how close it came)."""
        measured = [f for f in self.finalists if self.paired_median(f) is not None]
        return self.winner or max(measured, key=self.paired_median, default=None)

    @property
    def speedup(self) -> float | None:
        """The leader's ``ratio``; None when nothing was re-measured."""
        leader = self.leader
        if leader is None or not self.rounds:
            return None
        return self.ratio(leader)

    def entrant(self, label: str) -> Finalist:
        """The finalist labelled ``label``."""
        return next(finalist for finalist in self.finalists if finalist.label == label)

    def ratio(self, finalist: Finalist) -> float:
        """``finalist``'s median over the baseline's, of the rounds both ran (``paired``)."""
        runs, base = self.paired(finalist)
        return statistics.median(runs) / statistics.median(base)

    @property
    def ended_early(self) -> bool:
        """Whether the race's own rules ended it before its planned rounds (not study.budget_s or a stopped run, which
        leave it ``cut``, nor a failed baseline run): more rounds planned would have ended it there too."""
        return self.rounds < (self.planned_rounds or 0) and not self.cut and not self.failure

    def describe(self, trim: bool = False) -> str:
        """The verdict of the finalists' race or (``trim``) a trim race (its first finalist, the configuration it
        started from, and its variants, which ends early by ``alone``) in words, for reports: what raced, how it
        ended, why each entrant that left did, and who won or why none did. Its runs, round by round, are not in
        it: the reports give them in a table."""
        reference = self.finalists[0].label
        kept = f"trial {reference}, with every change," if trim else "the baseline"
        racing = [finalist for finalist in self.finalists if finalist.left is not Left.TRIMMED]
        entrants = (
            f"Trial {reference} and {counted(len(self.finalists) - 1, 'variant')} of it"
            if trim
            else counted(len(racing), "finalist").capitalize()
        )
        if self.cut and not self.rounds:
            return (
                f"study.budget_s left no time to race {entrants[0].lower()}{entrants[1:]} against the baseline, so "
                + ("nothing is undone." if trim else "none is recommended unproven.")
            )
        ran = counted(self.rounds, "interleaved round")
        if (self.planned_rounds or 0) > self.rounds:
            ran = f"{self.rounds} of {counted(self.planned_rounds, 'planned interleaved round')}"
        parts = [f"{entrants}, re-measured against the baseline in {ran} of processes of their own."]
        if self.cut:
            proof = f"the verdict is that of {counted(self.verdict_rounds, 'round')}"
            if self.proof_rounds > self.verdict_rounds:
                proof = (
                    f"a proof still counts the {self.proof_rounds} rounds planned (a win in "
                    f"{wins_in_words(self.proof_rounds)}), not the {counted(self.rounds, 'round')} run"
                )
            parts.append(
                "It stopped there (study.budget_s left no time for more rounds, or the run was stopped): "
                f"{proof}; the same command again goes on from them."
            )
        elif self.ended_early and self.winner:
            early = (
                "every other entrant had left it"
                if trim
                else "more rounds could not change the verdict, and the trim's races re-measure its winner against "
                "the baseline"
            )
            parts.append(f"The race ended early: {early}.")
        elif self.decided_after and self.decided_after < self.rounds and self.winner:
            verdict = "every variant had left it" if trim else "its verdict was in (more rounds could not change it)"
            parts.append(
                f"After round {self.decided_after} {verdict}; the rounds after it, of trial {self.winner.label} and "
                "the baseline alone, give the gain its interval."
            )
        parts += [
            f"Trial {finalist.label} {'did not race' if finalist.left is Left.TRIMMED else 'dropped'}: "
            f"{finalist.dropped}."
            for finalist in self.finalists
            if finalist.dropped
        ]
        wins = wins_in_words(self.proof_rounds) + (" up to the verdict" if self.decided_after else "")
        if self.failure:
            parts.append(f"Re-measuring the baseline failed ({self.failure}), so {kept} is kept.")
        elif self.winner:
            parts.append(
                f"Trial {self.winner.label} is confirmed: {self.speedup:.2f}x by medians (a win in {wins} and at "
                f"least {MIN_GAIN:.0%} gain){'; ' + why if (why := self.why_won()) else ''}."
            )
        else:
            parts.append(f"{self._why_none(wins)}, so {kept} is kept.")
        return " ".join(parts)

    def _why_none(self, wins: str) -> str:
        """Why no finalist is proven, in words (``wins``: the rounds a proof needs): the finalists that won every
        round they ran by MIN_GAIN by medians but left the race, and why each left (a failed run, say), those whose
        verdict was taken back, and those the race was cut short of proving (``short_of_rounds``); else that none
        won ``wins`` by MIN_GAIN."""
        left = [f for f in self.finalists if f.dropped and self._won_all(f)]
        faded = [f for f in self.finalists if self.faded(f)]
        short = [f for f in self.finalists if self.short_of_rounds(f)]
        if not left and not faded and not short:
            return f"No finalist won {wins} with at least {MIN_GAIN:.0%} gain"
        named = [
            f"trial {f.label} won every round it ran, {self.ratio(f):.2f}x by medians, but left the race ({f.dropped})"
            for f in left
        ]
        named += [f"trial {f.label}'s verdict was taken back: {self.shortfall(f)}" for f in faded]
        named += [f"trial {f.label} read {self.ratio(f):.2f}x by medians, but {self.shortfall(f)}" for f in short]
        return f"No finalist is proven: {'; '.join(named)}"

    def _won_all(self, finalist: Finalist) -> bool:
        """Whether ``finalist`` beat the baseline in every round it ran, and by MIN_GAIN by their medians."""
        pairs = list(zip(*self.paired(finalist), strict=True))
        won = bool(pairs) and all(run > base for run, base in pairs)
        return won and self.ratio(finalist) >= 1 + MIN_GAIN

    def to_dict(self) -> dict[str, Any]:
        return {
            **record_fields(self),
            "finalists": [finalist.to_dict() for finalist in self.finalists],
            "disturbed": {name: disturbance.to_dict() for name, disturbance in self.disturbed.items()},
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Confirmation:
        finalists = [Finalist.from_dict(finalist) for finalist in data["finalists"]]
        rounds, failure, planned = data["baseline_throughputs"], data.get("failure"), data.get("planned_rounds")
        disturbed = {name: Disturbance.from_dict(value) for name, value in data.get("disturbed", {}).items()}
        trials = data.get("trials")
        cut, decided_after = data.get("cut", False), data.get("decided_after")
        memories = data.get("baseline_peak_memories", unread_memories(rounds))
        return cls(rounds, finalists, failure, planned, cut, disturbed, trials, decided_after, memories)


def _chosen_over(winner: Finalist, other: Finalist) -> str:
    """Why ``winner`` was chosen over ``other``, tied with it within noise, by ``Confirmation.winner``'s order: fewer
    knobs changed, then less memory, then the higher median."""
    if winner.changes < other.changes:
        return f"changes fewer knobs ({winner.changes} against {other.changes})"
    if winner.peak_memory_mb < other.peak_memory_mb:
        less, more = _apart(winner.peak_memory_mb, other.peak_memory_mb)
        return f"changes as many knobs and uses less memory ({less} against {more} MiB)"
    return "changes as many knobs, uses no more memory and reads the higher median"


def _outrun(winner: Finalist, higher: list[Finalist], proven: list[Finalist]) -> str:
    """Why ``winner`` won over the proven finalists of ``higher`` median, in words: each is beaten (``beats``) by
    ``winner`` or by another proven finalist, and ``winner`` has the highest median of those none beats. Only a
    finalist that beats another is said to."""
    said = []
    for other in higher:
        by = winner if beats(winner, other) else next(f for f in proven if beats(f, other))
        said.append(f"trial {other.label} read a higher median, but {_named(by, winner)} beat it {BEATS_WORDS}")
    if any(not beats(winner, other) for other in higher):
        said.append("this one has the highest median of those no other proven finalist beats")
    return "; ".join(said)


def _apart(low: float, high: float) -> tuple[str, str]:
    """``low`` and ``high`` (MiB) to whole numbers, or to as many decimals (up to 2) as print them apart."""
    shown = (f"{low:.0f}", f"{high:.0f}")
    for decimals in (1, 2):
        if shown[0] != shown[1]:
            break
        shown = (f"{low:.{decimals}f}", f"{high:.{decimals}f}")
    return shown


def _named(finalist: Finalist, winner: Finalist) -> str:
    return "this one" if finalist is winner else f"trial {finalist.label}"
