"""The finalists' race: every rule of it, each written once here, and its record.

Before a trial is recommended over the baseline, the finalists are measured again, against the baseline and each
other, in rounds of processes of their own, the order rotating each round (``autotune/study/run_race.py`` runs them).

- Finalists (``select_finalists``): the trials whose single run beat the baseline's and came within FINALIST_WINDOW
  of the fastest, at most three, the simplest one tied with the fastest (``choose_candidate``) always among them;
  not one that changes more knobs than a simpler trial worth racing without beating its run by TIE_TOLERANCE; where
  every finalist compiles, each one's plain twin too, beyond the three, where it beat the baseline. A
  stored race stands for the trials measured when it ran (``Confirmation.is_current``).
- Leaving the race: a finalist whose run fails, that lost more rounds to the baseline than a proof allows
  (``unprovable``), or whose median falls RACE_MARGIN behind the leader's (``lagging``: of the runs not disturbed,
  ``TrialResult.disturbed``).
- The verdict early (``decided``): when more rounds could not change it (DECISIVE_GAIN), on a round none of whose runs
  was disturbed (``run_race.race``): a gain read against a slowed run is not decided by it. The other
  finalists then leave, and the winner and the baseline run the rounds left (``run_race._leave_to``), so that the
  gain stated has the interval of study.confirm_rounds rounds; the proof is the rounds won up to the verdict, which
  the rounds after it take back where they pull the winner's median under MIN_GAIN (``Confirmation.decided_after``,
  ``Confirmation.faded``; the finalists that left at the verdict do not come back). A winner the trim will race
  (``trim.will_trim``) does not: the race ends there, and the trim's first race runs them.
- Figures (``Confirmation.paired``): a finalist's ratio, wins and medians against the baseline are of the rounds
  both ran; a run of the round whose baseline run failed (the finalist ran first there) counts in none of them.
- Proof (``Confirmation.proven``): a win over the baseline in ``wins_needed`` rounds (a one-sided sign test at
  PROOF_LEVEL: every round of up to 5) and MIN_GAIN by medians, those of the rounds up to the verdict and of all. A
  race cut short before its verdict (by study.budget_s or a stopped run) proves only by the wins its planned rounds
  need (``Confirmation.proof_rounds``): one round the budget left proves nothing, and where the rounds it ran cannot
  prove the finalist (``short_of_rounds``), the baseline is kept and the same command again goes on from them.
- Ties (``beats``): a finalist is faster than another when it won most of their rounds and by more than
  TIE_TOLERANCE by the geometric mean of the per-round ratios; otherwise they are tied within noise.
- The winner (``Confirmation.winner``): of the proven finalists that no other proven finalist beats, the fastest by
  median, or of those tied with it, the one changing fewest knobs, then using least memory. No winner: keep the
  baseline.
- Only the changes that matter (``autotune/study/trim.py``): a winner changing two knobs or more races again, by the
  rules above, against itself with each change undone in turn (``undo``), the baseline racing too. A change whose
  undoing costs nothing beyond noise goes back to the baseline's value (``trimmed_to``: the race's winner, where the
  configuration it started from ran every round and does not beat it); the new winner races the variants undoing the
  changes whose undoing also tied with the configuration they were made from (``undo_next``), each alone and, two or
  more, all at once (``all_undone``: tied, it wins by fewest changes), until the winner of a race is the configuration
  it started from. What a race leaves in place must leave the changes undone so far costing less than TRIM_BOUND
  against the race's winner by the product of the paired ratios along the trim's races (``trim_path``: else nothing
  is undone, and the trim ends): ties add up, and a trim gives back less than the smallest gain a change is
  recommended for. A variant leaves such a race once it falls TRIM_MARGIN behind the configuration it was made from
  (not the leader: a lucky variant must not push out the others), or once that configuration beats it whatever the
  rounds left read, unless one reads the variant faster (``beaten_for_good``: each round so far by TIE_TOLERANCE; the
  change it undid is kept, as ``beats`` would keep it after the last round). The race ends early only once every
  variant has left it (``alone``: a run's noise can make two equal configurations look TIE_TOLERANCE apart in one
  round), or, where the configuration it started from ran fewer rounds before (the finalists' race, ended at its
  verdict), that configuration and the baseline run the rounds left. The recommendation is judged on the race
  that measured it against the baseline in most rounds, a trim race counting as the race of the configuration it
  started from against the baseline alone too (``judge_of``); its figures are that race's medians, and where it did
  not win that race, the baseline is kept (``proof_of``). A stored trim stands for the race's
  winner and rounds (``is_trim_of``); one of its races not ``settled`` goes on from its rounds in a later run where
  study.budget_s or a stopped run cut it short, and is raced again where a failed run ended it or the configuration
  it started from left it (it lost a round to the baseline there).
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass, field, fields, replace
from typing import Any

from autotune.knobs import KNOBS, changed, costly_values
from autotune.measure.stats import quiet_rounds
from autotune.records import TrialRecord
from autotune.trial.result import Disturbance, TrialResult
from autotune.words import counted

# A trial whose single run came within this fraction of the fastest may be the fastest: a single run varies by 6-20 %
# on our build machines (docs/benchmarks.md).
FINALIST_WINDOW = 0.15
# At most this many finalists race the baseline (and, where they all compile, their plain twins: ``select_finalists``).
MAX_FINALISTS = 3
# A finalist whose median falls this far behind the leader's leaves: about twice one run's noise.
RACE_MARGIN = 0.10
# The race ends once a finalist's slowest run beats the baseline's fastest by this much (twice that after round 1,
# counting the runs made before the race) and every other finalist's fastest by TIE_TOLERANCE; or, from round 2 on,
# once every finalist left beats the baseline so: more rounds could not tell them a few per cent apart.
DECISIVE_GAIN = 0.10
# In the trim's races a variant leaves once its median falls this far behind the configuration it was made from, and
# the change it undid is kept. Smaller, clear cases end sooner and a noisy round keeps more idle changes: the balance
# of runs against idle changes kept (docs/benchmarks.md, section 14, "The trim under noise: a model").
TRIM_MARGIN = 0.15
# Two finalists closer than this (geometric mean of their per-round ratios) are tied: about one run's noise.
TIE_TOLERANCE = 0.03
# What ``beats`` asks of the faster of two finalists, in words.
BEATS_WORDS = f"in most rounds and by more than {TIE_TOLERANCE:.0%} by the geometric mean of the per-round ratios"
# A finalist is proven when one no faster than the baseline would win as many rounds by chance at most this often,
# and its median beats the baseline's by MIN_GAIN.
PROOF_LEVEL = 0.125
MIN_GAIN = 0.02
# A trim gives back less than this of the finalists' race's winner, by the product of its races' paired ratios
# (``trim_path``): less than the smallest gain a change is recommended for.
TRIM_BOUND = MIN_GAIN


@dataclass
class Finalist:
    """A configuration re-measured in the confirmation race. ``changes`` counts the knobs it changes from the
    baseline; ``throughputs`` holds one run per round it took part in; ``dropped`` says why it left early, and
    ``failed_round`` which round's run failed where that is why.
    ``result`` is the first run of a configuration that is no trial of the study (a variant of the winner with one
    change undone), so that it can be recommended with its measurement; its peak memory is that run's."""

    label: str
    knobs: dict[str, Any]
    changes: int
    peak_memory_mb: float | None
    throughputs: list[float] = field(default_factory=list)
    dropped: str | None = None
    result: TrialResult | None = None
    failed_round: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {**_fields(self), "result": self.result.to_dict() if self.result else None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finalist:
        result = data.get("result")
        failed_round = data["failed_round"] if "failed_round" in data else _said_failed_round(data.get("dropped"))
        return cls(
            **{**data, "result": TrialResult.from_dict(result) if result else None, "failed_round": failed_round}
        )

    def fail(self, failure: object) -> None:
        """Drop it from the race: its run of the round after those it ran failed with ``failure``
        (``_failed_in_round`` says why)."""
        self.failed_round = len(self.throughputs) + 1
        self.dropped = _failed_in_round(self.failed_round, failure)

    @property
    def median(self) -> float | None:
        return statistics.median(self.throughputs) if self.throughputs else None


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
    race ended at its verdict for the trim to race its winner (``trim.will_trim``), and so did one
    ``cut`` short by study.budget_s (it proves only by the wins its planned rounds need: ``proof_rounds``) or by a
    stopped run (stored round by round: the summary takes no verdict from it, and a later run goes on from its
    rounds). ``disturbed`` names the runs it counted though something beside them slowed them
    (``autotune/study/disturbed.py``), and how. ``trials``:
    the labels of the measured trials it was about (None in a race stored before they were kept). ``decided_after``:
    the round after which its verdict was in (``decided``); the rounds after it, of its winner and the baseline
    alone, give the gain the interval of the planned rounds: the winner's proof is the rounds won up to the verdict,
    but rounds after it that pull its median under ``MIN_GAIN`` take the proof back, as a failed run does.
    """

    baseline_throughputs: list[float]
    finalists: list[Finalist]
    failure: str | None = None
    planned_rounds: int | None = None
    cut: bool = False
    disturbed: dict[str, Disturbance] = field(default_factory=dict)
    trials: list[str] | None = None
    decided_after: int | None = None

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
        slowed it (its name: RACE-ROUND, then ``label``'s suffix)."""
        ends = _run_suffix(label)
        return {int(name.removesuffix(ends).rsplit("-", 1)[1]) for name in self.disturbed if name.endswith(ends)}

    def gain_ratios(self, label: str) -> dict[int, float]:
        """Finalist ``label``'s throughput over the baseline's, by round (from 1), of the rounds a gain is stated from
        (``quiet_rounds``: not those in which something beside one of the two runs slowed it, where two or more
        rounds, and at least half of them, are left)."""
        finalist = next(f for f in self.finalists if f.label == label)
        pairs = enumerate(zip(*self.paired(finalist), strict=True), start=1)
        ratios = {index: run / base for index, (run, base) in pairs}
        return quiet_rounds(ratios, self.slowed_rounds(None) | self.slowed_rounds(label))

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
        fastest, _ = self._fastest_proven()
        proven = [f for f in self.finalists if self.proven(f)]
        if winner is fastest:
            higher = [f for f in proven if f.median > winner.median]
            if higher:
                return _outrun(winner, higher, proven)
            return "the fastest by median of those proven" if len(proven) > 1 else ""
        missed = _not_beaten(fastest, winner)
        tied = f"trial {fastest.label} read a higher median but did not beat it beyond noise ({missed}), and "
        if winner.changes < fastest.changes:
            return tied + f"this one changes fewer knobs ({winner.changes} against {fastest.changes})"
        less, more = _apart(winner.peak_memory_mb, fastest.peak_memory_mb)
        return tied + f"this one changes as many knobs and uses less memory ({less} against {more} MB)"

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
        entrants = (
            f"Trial {reference} and {counted(len(self.finalists) - 1, 'variant')} of it"
            if trim
            else counted(len(self.finalists), "finalist").capitalize()
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
            f"Trial {finalist.label} dropped: {finalist.dropped}." for finalist in self.finalists if finalist.dropped
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
            **_fields(self),
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
        return cls(rounds, finalists, failure, planned, cut, disturbed, trials, decided_after)


def _failed_in_round(index: int, failure: object) -> str:
    """Why a finalist whose run of round ``index`` failed with ``failure`` left the race (``Finalist.dropped``), as
    ``_said_failed_round`` reads it back."""
    return f"round {index} failed: {failure}"


# How ``_failed_in_round`` says, in ``dropped``, which round's run failed: read back from a race stored before
# ``Finalist.failed_round`` was kept.
_FAILED_ROUND_SAID = re.compile(r"round (\d+) failed: ")


def _said_failed_round(dropped: str | None) -> int | None:
    """The round whose run failed, read from ``dropped`` as a race stored before ``Finalist.failed_round`` was kept
    says it (``_failed_in_round``); None where it says no such thing."""
    said = _FAILED_ROUND_SAID.match(dropped or "")
    return int(said.group(1)) if said else None


def run_name(prefix: str, label: str | None) -> str:
    """The name of a race run (its files' name): PREFIX-baseline, or PREFIX-trial-LABEL for finalist ``label``."""
    return prefix + _run_suffix(label)


def round_of(name: str) -> str:
    """The round (PREFIX) of race run ``name``, as ``run_name`` made it."""
    return name.removesuffix("-baseline") if name.endswith("-baseline") else name.split("-trial-", 1)[0]


def _run_suffix(label: str | None) -> str:
    return "-baseline" if label is None else "-trial-" + re.sub(r"[^\w.-]+", "-", label)


def _fields(record: Finalist | Confirmation) -> dict[str, Any]:
    """A record's fields, one level deep (``asdict`` would convert the nested records its caller converts itself)."""
    return {item.name: getattr(record, item.name) for item in fields(record)}


def beats(faster: Finalist, other: Finalist) -> bool:
    """Whether ``faster`` is faster than ``other`` beyond noise: it won more than half of the rounds they both ran,
    and by more than TIE_TOLERANCE by the geometric mean of their per-round ratios."""
    won, rounds = _rounds_won(faster, other)
    return won > rounds / 2 and paired_ratio(faster.throughputs, other.throughputs) > 1 + TIE_TOLERANCE


def undone_again(reference: Finalist, variant: Finalist, new: Finalist) -> bool:
    """Whether a trim race of ``reference`` against its variants, won by ``new``, leaves ``variant``'s change to be
    undone again on top of ``new`` (``trim.undo_next``): ``variant`` is not ``new``, stayed in the race, and
    ``reference``, the configuration it was made from, did not beat it beyond noise (``beats``), as ``new`` did not.
    Against ``new`` itself a lucky winner's runs would keep a change that made no difference."""
    return variant is not new and variant.dropped is None and not beats(reference, variant)


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
    """``low`` and ``high`` (MB) to whole numbers, or to as many decimals (up to 2) as print them apart."""
    shown = (f"{low:.0f}", f"{high:.0f}")
    for decimals in (1, 2):
        if shown[0] != shown[1]:
            break
        shown = (f"{low:.{decimals}f}", f"{high:.{decimals}f}")
    return shown


def _named(finalist: Finalist, winner: Finalist) -> str:
    return "this one" if finalist is winner else f"trial {finalist.label}"


def _not_beaten(faster: Finalist, other: Finalist) -> str:
    """Which condition of ``beats`` ``faster`` missed against ``other``, in words."""
    won, rounds = _rounds_won(faster, other)
    if won <= rounds / 2:
        return f"it read faster in {won} of the {rounds} rounds both ran"
    return f"within {TIE_TOLERANCE:.0%} by the paired rounds' ratios"


def _rounds_won(faster: Finalist, other: Finalist) -> tuple[int, int]:
    """The rounds ``faster`` read faster than ``other`` in, of the rounds both ran."""
    pairs = list(zip(faster.throughputs, other.throughputs, strict=False))
    return sum(a > b for a, b in pairs), len(pairs)


def beaten_for_good(faster: Finalist, other: Finalist, rounds: int) -> bool:
    """Whether ``faster`` beats ``other`` (``beats``) over ``rounds`` rounds whatever the rounds still to run read,
    unless one reads ``other`` faster: it won every round so far, more than half of ``rounds``, each by more than
    TIE_TOLERANCE, and by more than TIE_TOLERANCE by the geometric mean over all ``rounds`` were the rest ties. Each
    round by the tolerance: at a run's noise, two rounds won by chance would often keep a change that does nothing
    (``benchmarks/trim_model.py``)."""
    pairs = list(zip(faster.throughputs, other.throughputs, strict=False))
    clear = all(a > b * (1 + TIE_TOLERANCE) for a, b in pairs)
    return (
        clear
        and len(pairs) > rounds / 2
        and sum(math.log(a / b) for a, b in pairs) > rounds * math.log(1 + TIE_TOLERANCE)
    )


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


def wins_in_words(rounds: int) -> str:
    """The wins a proof over ``rounds`` rounds takes (``wins_needed``), in words: "every round", or "at least 5 of 6
    rounds"."""
    needed = wins_needed(rounds)
    return "every round" if needed == rounds else f"at least {needed} of {rounds} rounds"


def trimmed_to(race: Confirmation) -> Finalist | None:
    """What a trim race (``autotune/study/trim.py``) leaves in place of the configuration it started from (its first
    finalist): its winner, where that is the configuration itself or a variant it does not beat beyond noise, and
    only where the race was ``settled``; else None (the configuration stays: no variant was shown to cost nothing
    against it)."""
    winner = race.winner
    if winner is None or not settled(race):
        return None
    reference = race.finalists[0]
    return winner if winner is reference or not beats(reference, winner) else None


@dataclass(frozen=True)
class TrimStep:
    """What one race of a trim left in place of the configuration it started from (``left``: None where nothing, the
    configuration itself where nothing was undone), and ``behind``: how much faster than the trim's result the race's
    winner (the configuration the trim started from) then runs, by the product of the paired ratios along the races
    (``trim_path``). ``ends``: the trim ends at this race (it left nothing, or nothing was undone). ``refused``: the
    race's own verdict (``trimmed_to``) where that bound refused it, and how much faster the race's winner would have
    run than it."""

    left: Finalist | None
    behind: float
    ends: bool
    refused: Finalist | None = None
    refused_behind: float | None = None


def trim_path(races: list[Confirmation]) -> list[TrimStep]:
    """What each of a trim's races left in place of the configuration it started from: its verdict (``trimmed_to``)
    where the race's winner then runs less than TRIM_BOUND faster than the trim's result by the product of the paired
    ratios along the races, else that configuration itself (nothing undone). Changes undone one race at a time, each
    within noise of the configuration it was undone from, must not add up to a loss: a trim gives back less than the
    smallest gain a change is recommended for. The trim ends at a race that left nothing or undid nothing; a race
    after it, or one not started from what the race before left, leaves nothing."""
    steps: list[TrimStep] = []
    behind = 1.0
    for race in races:
        reference = race.finalists[0]
        goes_on = not steps or (not steps[-1].ends and steps[-1].left.label == reference.label)
        verdict = trimmed_to(race) if goes_on else None
        if verdict is None or verdict is reference:
            steps.append(TrimStep(verdict, behind, ends=True))
            continue
        after = behind * paired_ratio(reference.throughputs, verdict.throughputs)
        if after < 1 + TRIM_BOUND:
            behind = after
            steps.append(TrimStep(verdict, behind, ends=False))
        else:
            steps.append(TrimStep(reference, behind, True, verdict, after))
    return steps


def trim_rounds(confirmation: Confirmation) -> int:
    """How many rounds each race of the trim of ``confirmation``'s winner is planned for: the race's own."""
    return confirmation.planned_rounds or confirmation.rounds


def is_trim_of(trim: list[Confirmation], confirmation: Confirmation) -> bool:
    """Whether the stored trim races ``trim`` are about ``confirmation``'s winner and its rounds: the first started
    from that winner and was planned for ``trim_rounds`` (else they are about an older winner, or a race of other
    rounds: study.confirm_rounds changed), so that the trim goes on from them (``autotune/study/trim.py``) and the
    summary recommends from them; else they stand for nothing. A race recorded without its plan (none that
    ``run_trim`` stored: it always records one) is taken as planned for these rounds."""
    winner = confirmation.winner
    return winner is not None and trim_started_from(trim, winner.label, trim_rounds(confirmation))


def trim_started_from(trim: list[Confirmation], label: str, rounds: int) -> bool:
    """Whether the stored trim races ``trim`` started from trial ``label`` and were planned for ``rounds`` rounds (one
    recorded without its plan is taken as planned for these): ``is_trim_of``'s rule."""
    return bool(trim) and trim[0].finalists[0].label == label and (trim[0].planned_rounds or rounds) == rounds


def started_alone(race: Confirmation) -> Confirmation:
    """``race`` with the configuration it started from (its first finalist) alone against the baseline."""
    return replace(race, finalists=race.finalists[:1])


def _as_proof(race: Confirmation) -> list[Confirmation]:
    """What a trim race stands as for ``judge_of``: itself, and where the configuration it started from did not win
    it, that configuration alone against the baseline (``started_alone``)."""
    reference, winner = race.finalists[0], race.winner
    return [race] if winner is not None and winner.label == reference.label else [race, started_alone(race)]


def proof_of(label: str, races: list[Confirmation]) -> Confirmation | None:
    """The race that proves ``label`` (``Summary.proof``): its judge (``judge_of``), where ``label`` won it; else
    None. A trim race also stands as the race of the configuration it started from against the baseline alone: where
    the trim keeps that configuration though a variant won (its verdict refused by TRIM_BOUND, or the race cut short),
    its rounds against the baseline still prove it, and the finalists' race, which ended at its verdict for the
    trim's first race to run the rounds left, may hold fewer."""
    judge = judge_of(label, races)
    return judge if judge is not None and _won_by(judge, label) else None


def judge_of(label: str, races: list[Confirmation]) -> Confirmation | None:
    """Of ``races`` (the finalists' race, then the trim's), the one that measured ``label`` against the baseline in
    most rounds (``measured_rounds``); of those of most rounds, one ``label`` won, the last of those. A trim race also
    stands as the race of the configuration it started from against the baseline alone (``started_alone``). A
    recommendation is judged on the most rounds measuring it: a longer race it did not win is not outweighed by a
    shorter one it did."""
    views = races[:1] + [each for race in races[1:] for each in _as_proof(race)]
    measuring = [(rounds, _won_by(race, label), race) for race in views if (rounds := measured_rounds(race, label))]
    return max(reversed(measuring), key=lambda judged: judged[:2], default=(0, False, None))[2]


def measured_rounds(race: Confirmation, label: str) -> int:
    """The rounds in which ``race`` measured ``label`` against the baseline, as ``judge_of`` counts them: every round,
    where it ran them all; the rounds it ran, where it left having lost more of them to the baseline than a proof
    over the race's planned rounds allows (``unprovable``); else none (it left for a failed run, or lagging, which say
    nothing of it against the baseline; a baseline run failed, which ends the race without a verdict; or the race was
    cut short before the rounds its proof needs, ``short_of_rounds``: not yet)."""
    finalist = next((f for f in race.finalists if f.label == label), None)
    if finalist is None or race.failure or not race.rounds:
        return 0
    ran = len(finalist.throughputs)
    if finalist.dropped is None:
        return race.rounds if ran == race.rounds and not race.short_of_rounds(finalist) else 0
    lost = unprovable(finalist, race.baseline_throughputs[:ran], race.planned_rounds or race.rounds)
    return ran if lost else 0


def _won_by(race: Confirmation, label: str) -> bool:
    return race.winner is not None and race.winner.label == label


def settled(race: Confirmation) -> bool:
    """Whether a trim race tested its variants to its end (``unsettled`` finds no reason it did not)."""
    return unsettled(race) is None


def unsettled(race: Confirmation) -> str | None:
    """Why a trim race did not test its variants to its end, in words: a baseline run failed, the configuration it
    started from left it (a failed run, a round lost to the baseline) or missed a round, or it was cut short (by
    study.budget_s or a stopped run); None where it did."""
    reference = race.finalists[0]
    if race.failure is not None:
        return f"a baseline run failed in it ({race.failure})"
    if reference.dropped is not None:
        return f"trial {reference.label}, the configuration it started from, left it ({reference.dropped})"
    if len(reference.throughputs) != race.rounds:
        return f"trial {reference.label}, the configuration it started from, did not run every round"
    if race.cut and not race.rounds:
        return "it did not start (study.budget_s left no time for it, or the run stopped)"
    if race.cut:
        return f"it stopped after {race.rounds} of {race.planned_rounds} rounds (study.budget_s, or the run stopped)"
    return None


def alone(running: list[Finalist], baseline_runs: list[float], before_race: dict[str, float]) -> bool:
    """Whether at most one finalist is still running: the trim's races are decided only then."""
    return len(running) <= 1


def _before(before_race: dict[str, float], label: str) -> list[float]:
    return [before_race[label]] if label in before_race else []


def count_changes(knobs: dict[str, object], baseline: dict[str, object]) -> int:
    """How many knobs ``knobs`` changes from ``baseline`` (``changed``)."""
    return len(changed(knobs, baseline))


def choose_candidate(baseline: TrialRecord, trials: list[TrialRecord]) -> TrialRecord | None:
    """The trial to recommend over the baseline from single runs, or None when the baseline is as good (the tie rule
    without a race).

    Among the measured configurations within TIE_TOLERANCE of the fastest (the baseline included, but no trial
    itself within TIE_TOLERANCE of the baseline: it would change knobs for nothing), the one that changes fewest
    knobs from the baseline wins, then the one with the lowest peak memory: a tie within noise is no reason to
    change more than needed.
    """
    measured = [r for r in [baseline, *trials] if r.result.ok]
    if not measured:
        return None
    fastest = max(r.throughput for r in measured)
    beyond_baseline = baseline.throughput * (1 + TIE_TOLERANCE) if baseline.result.ok else 0.0
    tied = [
        r
        for r in measured
        if r.throughput >= fastest * (1 - TIE_TOLERANCE) and (r is baseline or r.throughput > beyond_baseline)
    ]
    base = baseline.result.knobs
    chosen = min(tied, key=lambda r: (count_changes(r.result.knobs, base), r.result.peak_memory_mb, -r.throughput))
    return None if chosen is baseline else chosen


def select_finalists(baseline: TrialRecord, trials: list[TrialRecord], limit: int = MAX_FINALISTS) -> list[TrialRecord]:
    """The trials worth re-measuring before recommending one: those whose single run beat the baseline's and
    came within FINALIST_WINDOW of the fastest, fastest first, at most ``limit``; the simplest one tied with
    the fastest (``choose_candidate``) is always among them. Where every finalist compiles, each one's plain twin (the
    same without the costly knob) races too, beyond ``limit``, where its run beat the baseline's: one lucky compiled
    run would otherwise push it out of the window, and where compile fails to prove its gain nothing that beat the
    baseline would be left to race.

    Left out: a trial that changes more knobs than a simpler one worth racing and whose run did not beat that one's
    by TIE_TOLERANCE. The race's tie rule could recommend it only where it beat the simpler one (``beats``: most
    rounds, and by more than TIE_TOLERANCE by the geometric mean of the per-round ratios), and its own run already did
    not by that much; racing it would cost a run per round (a compiled one, its compile).
    """
    return finalist_choice(baseline, trials, limit)[0]


def finalist_choice(
    baseline: TrialRecord, trials: list[TrialRecord], limit: int = MAX_FINALISTS
) -> tuple[list[TrialRecord], dict[str, str]]:
    """``select_finalists``'s finalists, and why each other trial whose run came within FINALIST_WINDOW of the
    fastest was left out, by label: a simpler one worth racing its run did not beat by TIE_TOLERANCE, or the
    ``limit``."""
    if not baseline.result.ok:
        return [], {}
    measured = [r for r in trials if r.result.ok and r.throughput > baseline.throughput]
    if not measured:
        return [], {}
    fastest = max(r.throughput for r in measured)
    near = [r for r in measured if r.throughput >= fastest * (1 - FINALIST_WINDOW)]
    base = baseline.result.knobs
    worth: list[TrialRecord] = []  # simplest first: only a trial worth racing leaves out one that changes more
    left_out: dict[str, str] = {}
    for record in sorted(near, key=lambda r: (count_changes(r.result.knobs, base), -r.throughput)):
        simpler = _outdone_by_simpler(record, worth, base)
        if simpler is None:
            worth.append(record)
        else:
            left_out[record.label] = (
                f"it changes more knobs than trial {simpler.label} and its run did not beat that one's by "
                f"{TIE_TOLERANCE:.0%}"
            )
    finalists = sorted(worth, key=lambda r: -r.throughput)[:limit]
    simplest = choose_candidate(baseline, trials)
    if simplest is not None and simplest not in finalists:
        finalists = [*finalists[: limit - 1], simplest]
    if all(costly_values(f.result.knobs) for f in finalists):
        plain = [twin for f in finalists if (twin := _plain_twin(f, measured)) is not None]
        finalists = [*finalists, *[twin for i, twin in enumerate(plain) if twin not in plain[:i]]]
    for record in worth:
        if record not in finalists:
            left_out[record.label] = f"at most {limit} finalists race, the fastest runs first"
    racing = {f.label for f in finalists}
    return finalists, {label: why for label, why in left_out.items() if label not in racing}


def _plain_twin(record: TrialRecord, measured: list[TrialRecord]) -> TrialRecord | None:
    """Of ``measured``, ``record``'s configuration with its costly knobs (torch.compile) at their defaults, where
    ``record`` sets one."""
    costly = costly_values(record.result.knobs)
    if not costly:
        return None
    plain = {**record.result.knobs, **{name: KNOBS[name].baseline_default for name in costly}}
    return next((other for other in measured if other.result.knobs == plain), None)


def _outdone_by_simpler(record: TrialRecord, worth: list[TrialRecord], base: dict[str, object]) -> TrialRecord | None:
    """The first trial of ``worth`` that changes fewer knobs than ``record`` and whose run ``record``'s did not beat
    by TIE_TOLERANCE; None where there is none."""
    changes = count_changes(record.result.knobs, base)
    simpler = [other for other in worth if count_changes(other.result.knobs, base) < changes]
    return next((other for other in simpler if record.throughput <= other.throughput * (1 + TIE_TOLERANCE)), None)


def rounds_lost(finalist: Finalist, baseline_runs: list[float]) -> int:
    """The rounds so far in which ``finalist`` was no faster than the baseline."""
    return sum(f <= b for f, b in zip(finalist.throughputs, baseline_runs, strict=True))


def unprovable(finalist: Finalist, baseline_runs: list[float], rounds: int) -> bool:
    """Whether ``finalist`` has lost more rounds to the baseline than a proof over ``rounds`` rounds allows."""
    return rounds_lost(finalist, baseline_runs) > rounds - wins_needed(rounds)


def lagging(runs: list[float], leader_runs: list[float], margin: float = RACE_MARGIN) -> bool:
    """Whether a finalist's median so far is ``margin`` or more behind the leader's, of their runs not
    disturbed (a load slows configurations unalike: one whose every run was slowed stays for the next round)."""
    return bool(runs and leader_runs) and statistics.median(runs) < statistics.median(leader_runs) * (1 - margin)


def decided(running: list[Finalist], baseline_runs: list[float], before_race: dict[str, float]) -> bool:
    """Whether more rounds could not change the verdict (DECISIVE_GAIN): one running finalist leads the baseline and
    every other beyond doubt, or (from round 2 on) every running finalist leads the baseline beyond doubt.
    ``before_race`` holds the throughput of the baseline and of each finalist measured before the race, where one
    was, counted after round 1."""
    if not running:
        return False
    gain, runs, base = DECISIVE_GAIN, {f.label: f.throughputs for f in running}, baseline_runs
    if len(baseline_runs) == 1:
        gain = 2 * DECISIVE_GAIN
        runs = {f.label: [*_before(before_race, f.label), *f.throughputs] for f in running}
        base = [*_before(before_race, "baseline"), *baseline_runs]
    clear_of_baseline = {f.label for f in running if min(runs[f.label]) > max(base) * (1 + gain)}
    if len(baseline_runs) > 1 and len(clear_of_baseline) == len(running):
        return True
    leader = max(running, key=lambda f: min(runs[f.label]))
    others_fastest = max((max(runs[f.label]) for f in running if f is not leader), default=0.0)
    return leader.label in clear_of_baseline and min(runs[leader.label]) > others_fastest * (1 + TIE_TOLERANCE)
