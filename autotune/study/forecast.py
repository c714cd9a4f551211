"""What the rest of a tuning run is expected to take, said once, as soon as its first search trial is measured: a
study's length is set by its search trials, the race's and the trim's rounds, and the profiles, and until a trial
with the search's settings has run, nothing tells how long one takes (the baseline often runs no workers, whose
windows are shorter).

Each figure is the planned most, at the pace ``RunClock`` measured: every search trial left (the guided search may
converge sooner; with several slots, a trial under way counts whole), every round of the race (``app._race_round_s``:
the baseline and up to three finalists-to-be), every round of the trim's first race of that first trial
(``trim.first_race``: where the probe ran, its pick, which usually changes what the winner will; a draw of Optuna's
sampler where not), and the profiles. A later trim race adds rounds of the changes that tied; finalists and variants
that fall behind leave their race early. So the figure is of the order of the run, not a bound: study.budget_s is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.study.clock import RunClock
from autotune.words import counted, duration


@dataclass(frozen=True)
class Forecast:
    """The rest of a run, by step: ``trials`` search trials of ``trial_s`` each, ``slots`` at once; ``rounds`` rounds
    of the race of ``race_round_s`` (0: no race) and of the trim's first race of ``trim_round_s`` (0: no trim
    expected), which races ``variants`` variants of the search's ``first`` trial; and ``profiles_s`` of profiling."""

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
            steps.append(
                f"the trim's first race, where the winner changes what {self.first} does "
                f"({counted(self.variants, 'variant')}, {rounds}, ~{self.trim_round_s:.0f} s each)"
            )
        if self.profiles_s:
            steps.append(f"2 profiles (~{self.profiles_s / 2:.0f} s each)")
        if not steps:
            return ""
        if self.trim_round_s:
            caveats = [
                "the race ends at its verdict and a variant that falls behind leaves early",
                "the trim may race again, beyond this",
            ]
        else:
            caveats = ["a finalist that falls behind leaves early"] if self.race_round_s else []
        bound = (
            "study.budget_s=SECONDS bounds it"
            if budget_left_s is None
            else f"study.budget_s leaves {max(budget_left_s, 0.0):.0f} s of it"
        )
        return f"up to about {duration(self.total_s)} more: {'; '.join([', '.join(steps), *caveats, bound])}"


def forecast(
    clock: RunClock,
    *,
    first: str,
    trials_left: int,
    rounds: int,
    race_round_s: float,
    trim_round: list[dict[str, Any]],
    slots: int,
    profiles: bool,
) -> Forecast:
    """The rest of a run whose search trial ``first`` was the first measured, with ``trials_left`` search trials to go
    in ``slots`` at once, races of ``rounds`` rounds (0: none), a round of the finalists' race expected to take
    ``race_round_s``, the configurations of a round of the trim's first race of ``first`` (``trim.first_race``;
    none: no trim), and, with ``profiles``, the baseline and the recommendation profiled."""
    return Forecast(
        trials=trials_left,
        trial_s=clock.screen_s(),
        slots=max(slots, 1),
        rounds=rounds,
        race_round_s=race_round_s if rounds else 0.0,
        trim_round_s=clock.round_s(trim_round) if rounds and trim_round else 0.0,
        variants=max(len(trim_round) - 2, 0),  # besides the baseline and the winner
        profiles_s=clock.profiles_s() if profiles else 0.0,
        first=first,
    )
