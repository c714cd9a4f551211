"""What the rest of a tuning run is expected to take, said once, as soon as its first search trial is measured: a
study's length is set by its search trials, the race's and the trim's rounds, and the profiles, and until a trial
with the search's settings has run, nothing tells how long one takes (the baseline often runs no workers, whose
windows are shorter).

Each figure is the planned most, at the pace ``RunClock`` measured: every search trial left (the guided search may
converge sooner; with several slots, a trial under way counts whole), every round of the race (the baseline and up to
three finalists-to-be), every round of the trim's first race (``trim.first_race``), and the profiles. Only a trial
that may race (``may_race``: its run beat the baseline's) says how long a finalist or the winner runs: the
finalists-to-be then run as long as the slower of it and the baseline, and the trim's first race is that trial's
(where the probe ran, its pick, which usually changes what the winner will; a draw of Optuna's sampler where not).
Where it did not beat the baseline, each finalist and the winner is counted at the baseline's run time, and the trim's
first race as that of a winner of UNKNOWN_WINNER_CHANGES changes, the fewest the trim races (of the trim, then, the
least rather than the most), the line saying so. A later trim race adds rounds of the changes that tied; finalists
and variants that fall behind leave their race early. So the figure is of the order of the run, not a bound:
study.budget_s is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.records import TrialRecord, record_name
from autotune.results.finalist import Finalist
from autotune.results.race_rules import count_changes, select_finalists
from autotune.study.clock import RunClock
from autotune.study.trim import first_race
from autotune.trial.result import TrialResult
from autotune.words import counted, duration

# The trim races a winner changing two knobs or more (``trim.first_race``), with a variant for each change undone.
# Where no trial has beaten the baseline yet, its first race is counted for the fewest such changes.
UNKNOWN_WINNER_CHANGES = 2


@dataclass(frozen=True)
class Forecast:
    """The rest of a run, by step: ``trials`` search trials of ``trial_s`` each, ``slots`` at once; ``rounds`` rounds
    of the race of ``race_round_s`` (0: no race) and of the trim's first race of ``trim_round_s`` (0: no trim
    expected), which races ``variants`` variants of the winner; and ``profiles_s`` of profiling. ``first`` is the
    search trial that stands in for the winner ("trial 0"), or "" where none beat the baseline: the finalists and the
    winner counted at the baseline's run time, the winner changing UNKNOWN_WINNER_CHANGES knobs."""

    trials: int
    trial_s: float
    slots: int
    rounds: int
    race_round_s: float
    trim_round_s: float
    variants: int
    profiles_s: float
    first: str

    @property
    def total_s(self) -> float:
        """The seconds of the whole rest, every step run to its planned end."""
        search_s = math.ceil(self.trials / self.slots) * self.trial_s
        return search_s + self.rounds * (self.race_round_s + self.trim_round_s) + self.profiles_s

    def said(self, budget_left_s: float | None) -> str:
        """The forecast in words, with what study.budget_s leaves where set (``budget_left_s``); "" where nothing is
        expected."""
        rounds = counted(self.rounds, "round")
        steps = [f"{counted(self.trials, 'search trial')} (~{self.trial_s:.0f} s each)"] if self.trials else []
        if self.race_round_s:
            steps.append(f"the race ({rounds}, ~{self.race_round_s:.0f} s each)")
        if self.trim_round_s:
            winner = (
                f"what {self.first} does"
                if self.first
                else f"{counted(UNKNOWN_WINNER_CHANGES, 'knob')}, the fewest the trim races"
            )
            steps.append(
                f"the trim's first race, where the winner changes {winner} "
                f"({counted(self.variants, 'variant')}, {rounds}, ~{self.trim_round_s:.0f} s each)"
            )
        if self.profiles_s:
            steps.append(f"2 profiles (~{self.profiles_s / 2:.0f} s each)")
        if not steps:
            return ""
        said = "; ".join([", ".join(steps), *self._caveats(budget_left_s)])
        return f"up to about {duration(self.total_s)} more: {said}"

    def _caveats(self, budget_left_s: float | None) -> list[str]:
        """What the figure assumes and leaves out, and what study.budget_s leaves of it (``budget_left_s``)."""
        caveats = []
        if self.race_round_s and not self.first:
            caveats.append("no trial has beaten the baseline yet: each finalist and the winner counted at its run time")
        if self.trim_round_s:
            caveats += [
                "the race ends at its verdict and a variant that falls behind leaves early",
                "the trim may race again, beyond this",
            ]
        elif self.race_round_s:
            caveats.append("a finalist that falls behind leaves early")
        bound = (
            "study.budget_s=SECONDS bounds it"
            if budget_left_s is None
            else f"study.budget_s leaves {max(budget_left_s, 0.0):.0f} s of it"
        )
        return [*caveats, bound]


def race_round_s(clock: RunClock, baseline: TrialResult, finalists: int) -> float:
    """What a round of the race of the ``baseline`` and ``finalists`` finalists-to-be, none known yet, is expected to
    take: each as long as the slowest configuration measured so far that may race (its run beat the baseline's:
    ``RunClock.round_s``), else as the baseline. The ``[time]`` line and what study.budget_s keeps back for the race
    read this one rule; 0 without finalists."""
    if not finalists:
        return 0.0
    return clock.round_s([baseline.knobs], unknown=finalists, faster_than=baseline.timing.throughput)


def may_race(baseline: TrialRecord, trial: TrialRecord) -> bool:
    """Whether ``trial``'s run makes it a finalist-to-be (``select_finalists``: it beat the baseline's). Only such a
    trial tells how long a finalist, or the winner the trim races, runs: one that cannot race (a compiled trial far
    slower than the baseline) would price every round by runs that no round makes."""
    return bool(select_finalists(baseline, [trial]))


def forecast(
    clock: RunClock,
    *,
    baseline: TrialRecord,
    first: TrialRecord,
    trials_left: int,
    rounds: int,
    finalists: int,
    batch_policy: str,
    device: str,
    slots: int,
    profiles: bool,
) -> Forecast:
    """The rest of a run whose search trial ``first`` was the first measured, with ``trials_left`` search trials to go
    in ``slots`` at once; races of ``rounds`` rounds (0: none) of the ``baseline`` and ``finalists`` finalists-to-be,
    each as long as the slower of the baseline and ``first`` where ``first`` may race (``may_race``), else as the
    baseline; the trim's first race (``trim.first_race``, under search.batch_policy ``batch_policy`` on a ``device``
    of that kind) of ``first`` where it may race, else of a winner of UNKNOWN_WINNER_CHANGES changes, each run as the
    baseline's; and, with ``profiles``, the baseline and the recommendation profiled."""
    racing = may_race(baseline, first)
    base = baseline.result.knobs
    trim_round = _trim_round(baseline, first, batch_policy, device) if racing else [base] * (2 + UNKNOWN_WINNER_CHANGES)
    return Forecast(
        trials=trials_left,
        trial_s=clock.screen_s(),
        slots=max(slots, 1),
        rounds=rounds,
        race_round_s=race_round_s(clock, baseline.result, finalists) if rounds else 0.0,
        trim_round_s=clock.round_s(trim_round) if rounds and trim_round else 0.0,
        variants=max(len(trim_round) - 2, 0),  # besides the baseline and the winner
        profiles_s=clock.profiles_s() if profiles else 0.0,
        first=record_name(first.label) if racing else "",
    )


def _trim_round(baseline: TrialRecord, winner: TrialRecord, batch_policy: str, device: str) -> list[dict[str, Any]]:
    """The configurations of a round of the trim's first race of ``winner`` (``trim.first_race``); none where it
    changes fewer than two knobs."""
    base, knobs = baseline.result.knobs, winner.result.knobs
    return first_race(Finalist(winner.label, knobs, count_changes(knobs, base), None), base, batch_policy, device)
