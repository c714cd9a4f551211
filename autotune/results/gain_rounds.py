"""The rounds a recommendation's gain is stated from: those of the race that proves it, and every other race round
that ran it beside the baseline without choosing it.

Each race round runs the baseline and each configuration still in the race close together, so each round pairs one
run of the recommendation with one of the baseline, whichever race it belongs to. A race that chose the recommendation
among others (the finalists' race, or a trim race its variant won) chose it on the rounds it read, which lifts them,
the more so where the race ended at its verdict, right after the winner read high: those rounds count only where that
race is the one that proves it (``Summary.proof``). The rounds of a trim race that started from it (it runs that
configuration and the baseline every round) and a race's rounds after its verdict for it (only it and the baseline ran
them) did not choose it: they count too, for a narrower interval and a figure less lifted by the choice, the rounds
of a trim race it left having lost to the baseline as well (leaving them out because they read low would lift it).
Where the gain falls under the least a change must gain and the rounds of other races read under it too, they take
the proof back (``GainRounds.takes_proof_back``), and the baseline is kept.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from autotune.measure.stats import quiet_rounds
from autotune.results.finalist import Finalist
from autotune.results.race import Confirmation
from autotune.results.race_rules import MIN_GAIN
from autotune.trial.result import Disturbance
from autotune.words import listed, rounds_named, slowed_rounds_note


@dataclass(frozen=True)
class PairedRound:
    """One race round's run of the recommendation and of the baseline: their samples/s and peak memories (MiB; None
    where not read), the race's index (in ``Summary.races``: the finalists' race first) and the round's number in it
    (from 1), and what slowed either run from beside it (``Confirmation.disturbed``), if anything did."""

    race: int
    round: int
    recommended: float
    baseline: float
    recommended_memory: float | None
    baseline_memory: float | None
    disturbed: tuple[Disturbance, ...] = ()

    @property
    def ratio(self) -> float:
        return self.recommended / self.baseline


@dataclass(frozen=True)
class GainRounds:
    """The recommendation's paired rounds (``paired_rounds``), numbered from 1 in the order they ran (``rounds``),
    and the index of the race that proves it (``proof``)."""

    rounds: tuple[PairedRound, ...]
    proof: int

    def counted(self) -> dict[int, float]:
        """The ratios, by number, of the rounds the gain is stated from: not those in which something beside one of
        the two runs slowed it, where enough stay quiet (``quiet_rounds``)."""
        ratios = {number: paired.ratio for number, paired in enumerate(self.rounds, 1)}
        return quiet_rounds(ratios, self.slowed)

    @property
    def gain(self) -> float:
        """The geometric mean of the ratios of the rounds the gain counts (``counted``): the gain stated from them."""
        return statistics.geometric_mean(self.counted().values())

    @property
    def takes_proof_back(self) -> bool:
        """Whether the gain over the counted rounds (``counted``) falls under MIN_GAIN, the least a change must gain,
        and the counted rounds of other races than the one that proves the recommendation (rounds that did not choose
        it) read under it too: they then take that proof back, as a race's rounds after its verdict that pull its
        median under MIN_GAIN take back its verdict (``Confirmation.shortfall``). Where they read MIN_GAIN or more, a
        gain under it is the proving race's own rounds', which are its verdict's to judge (a proof by medians whose
        rounds' geometric mean is under MIN_GAIN)."""
        others = [ratio for number, ratio in self.counted().items() if self.rounds[number - 1].race != self.proof]
        return bool(others) and self.gain < 1 + MIN_GAIN and statistics.geometric_mean(others) < 1 + MIN_GAIN

    @property
    def left_out(self) -> list[int]:
        """The numbers of the rounds the gain does not count (``counted``): something beside a run slowed them."""
        counted = self.counted()
        return [number for number in range(1, len(self.rounds) + 1) if number not in counted]

    def left_out_note(self, race_name: Callable[[int], str]) -> str:
        """``left_out`` in words, to follow the rounds counted, each named by its race where they come from more
        than one (``named``): " (round 2 left out: a run of it was slowed)"; empty where none was."""
        left_out = self.left_out
        return slowed_rounds_note(left_out, self.named(left_out, race_name)) if left_out else ""

    @property
    def slowed(self) -> set[int]:
        """The numbers of the rounds in which something beside one of the two runs slowed it."""
        return {number for number, paired in enumerate(self.rounds, 1) if paired.disturbed}

    def of(self, numbers: list[int]) -> list[PairedRound]:
        """The rounds numbered ``numbers``."""
        return [self.rounds[number - 1] for number in numbers]

    @property
    def races(self) -> list[int]:
        """The races the rounds come from (indexes in ``Summary.races``), in the order they ran."""
        return sorted({paired.race for paired in self.rounds})

    def named(self, numbers: list[int], race_name: Callable[[int], str]) -> str:
        """The rounds numbered ``numbers`` in words, as the races' tables number them: "rounds 1 and 3" where every
        round comes from one race, else with the race each is of ("round 3 of the finalists' race and round 1 of
        trim race 1", ``race_name`` naming a race by its index)."""
        if len(self.races) == 1:
            return rounds_named([paired.round for paired in self.of(numbers)])
        by_race: dict[int, list[int]] = {}
        for paired in self.of(numbers):
            by_race.setdefault(paired.race, []).append(paired.round)
        return listed([f"{rounds_named(rounds)} of {race_name(race)}" for race, rounds in by_race.items()])

    def by_race(self, race_name: Callable[[int], str]) -> str:
        """How many rounds each race gave, in words, where more than one did: " (3 of the finalists' race, 2 of trim
        race 1)"; empty else."""
        if len(self.races) < 2:
            return ""
        counts = {race: sum(paired.race == race for paired in self.rounds) for race in self.races}
        return f" ({', '.join(f'{count} of {race_name(race)}' for race, count in counts.items())})"


def paired_rounds(proof: int, label: str, races: list[Confirmation]) -> GainRounds:
    """The rounds in which the configuration ``label`` (in ``races[proof]``, the race that proves it) and the baseline
    both ran (``Confirmation.paired``): every round of that race, and of ``races`` (the finalists' race, then the
    trim's) those that did not choose it: every round of a trim race that started from it, and the rounds a race ran
    after its verdict for it (``Confirmation.decided_after``)."""
    knobs = races[proof].entrant(label).knobs
    rounds = []
    for index, race in enumerate(races):
        counted = _unchosen(race, knobs, index > 0) if index != proof else (race.entrant(label), 1)
        if counted is None:
            continue
        entrant, first = counted
        runs, base = race.paired(entrant)
        slowed = race.disturbances(None), race.disturbances(entrant.label)
        memories = (entrant.peak_memories, race.baseline_peak_memories)
        for number, (run, base_run) in enumerate(zip(runs, base, strict=True), 1):
            if number < first:
                continue
            run_memory, base_memory = (_at(each, number) for each in memories)
            disturbed = tuple(each[number] for each in slowed if number in each)
            rounds.append(PairedRound(index, number, run, base_run, run_memory, base_memory, disturbed))
    return GainRounds(tuple(rounds), proof)


def _unchosen(race: Confirmation, knobs: dict[str, Any], trim: bool) -> tuple[Finalist, int] | None:
    """The entrant of ``race`` (a ``trim`` race, or the finalists') that is the configuration ``knobs``, and the first
    of its rounds that did not choose it: 1 where the trim race started from it, the round after the verdict where the
    race was decided for it early; None where every round of the race chose it, or none ran it."""
    started = race.finalists[0] if trim and race.finalists else None
    if started is not None and started.knobs == knobs:
        return started, 1
    winner = race.winner if race.decided_after else None
    if winner is not None and winner.knobs == knobs:
        return winner, race.decided_after + 1
    return None


def _at(memories: list[float | None], number: int) -> float | None:
    """Round ``number``'s peak memory of ``memories``; None where not kept (a race stored before they were)."""
    return memories[number - 1] if number <= len(memories) else None
