"""What the rest of a tuning run is expected to take, said once, as soon as its first search trial is measured: a
study's length is set by its search trials, the race's and the trim's rounds, and the profiles, and until a trial
with the search's settings has run, nothing tells how long one takes (the baseline often runs no workers, whose
windows are shorter).

Each figure is the planned most, at the pace ``RunClock`` measured: every search trial left (the guided search may
converge sooner), every round of the race (it may end at its verdict) and every round of the trim's first race,
whose entrants the first trial foretells (the probe's pick, changing most of what the winner will: itself, each of
its changes undone, the baseline). A later trim race adds rounds of the changes that tied; a variant that clearly
matters leaves its race after a round. So the figure is of the order of the run, not a bound: study.budget_s is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from autotune.results.race import count_changes
from autotune.study.clock import RunClock
from autotune.words import counted


@dataclass(frozen=True)
class Forecast:
    """The rest of a run, by step: ``trials`` search trials of ``trial_s`` each, ``slots`` at once; ``rounds`` rounds
    of the race of ``race_round_s`` and of the trim's first race of ``trim_round_s`` (0: no trim expected), a race of
    a winner changing ``changes`` knobs as the search's ``first`` trial does; and ``profiles_s`` of profiling."""

    trials: int
    trial_s: float
    slots: int
    rounds: int
    race_round_s: float
    trim_round_s: float
    profiles_s: float
    first: str
    changes: int

    @property
    def total_s(self) -> float:
        search_s = math.ceil(self.trials / self.slots) * self.trial_s
        return search_s + self.rounds * (self.race_round_s + self.trim_round_s) + self.profiles_s

    def said(self, budget_left_s: float | None) -> str:
        """The forecast in words, with what study.budget_s leaves where set (``budget_left_s``)."""
        rounds = counted(self.rounds, "round")
        steps = [f"{counted(self.trials, 'search trial')} (~{self.trial_s:.0f} s each)"] if self.trials else []
        if self.rounds and self.race_round_s:
            steps.append(f"the race ({rounds}, ~{self.race_round_s:.0f} s each)")
        if self.rounds and self.trim_round_s:
            steps.append(
                f"the trim's first race where the winner changes {self.changes} knobs as {self.first} does "
                f"({rounds}, ~{self.trim_round_s:.0f} s each)"
            )
        if self.profiles_s:
            steps.append(f"2 profiles (~{self.profiles_s / 2:.0f} s each)")
        bound = (
            "study.budget_s=SECONDS bounds it"
            if budget_left_s is None
            else f"study.budget_s leaves {max(budget_left_s, 0.0):.0f} s of it"
        )
        raced = self.rounds and self.race_round_s
        caveats = ["a race ends sooner once decided"] if raced else []
        caveats += ["the trim may race again"] if raced and self.trim_round_s else []
        return f"up to about {_duration(self.total_s)} more: {'; '.join([', '.join(steps), *caveats, bound])}"


def forecast(
    clock: RunClock,
    baseline: dict[str, Any],
    first: dict[str, Any],
    first_label: str,
    trials_left: int,
    rounds: int,
    finalists: int,
    slots: int = 1,
    profiles: bool = True,
) -> Forecast:
    """The rest of a run whose first search trial (``first``'s knobs, named ``first_label``) was just measured
    against ``baseline``'s, with ``trials_left`` search trials to go in ``slots`` at once, races of ``rounds`` rounds
    (0: none) of up to ``finalists`` finalists, and, with ``profiles``, the baseline and the recommendation
    profiled."""
    race_round_s = clock.round_s([baseline], unknown=finalists) if rounds and finalists else 0.0
    changes = count_changes(first, baseline)
    # The trim's first race: the baseline, the winner and each of its changes undone (none measured yet: each as long
    # as the winner); only a winner changing two knobs or more is trimmed.
    trim_round_s = clock.round_s([baseline] + [first] * (1 + changes)) if rounds and changes >= 2 else 0.0
    return Forecast(
        trials=trials_left,
        trial_s=clock.screen_s(),
        slots=max(slots, 1),
        rounds=rounds,
        race_round_s=race_round_s,
        trim_round_s=trim_round_s,
        profiles_s=2 * clock.run_s() if profiles else 0.0,
        first=first_label,
        changes=changes,
    )


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"
