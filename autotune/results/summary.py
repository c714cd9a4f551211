"""Ranking the measured configurations and choosing the one to recommend."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import cached_property

from autotune.knobs import changed
from autotune.measure.stats import RatioInterval, ratio_interval
from autotune.records import TrialRecord
from autotune.results.finalist import Finalist, Left, median_memory
from autotune.results.gain_rounds import GainRounds, paired_rounds
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import choose_candidate, counted_slowed_unreliable
from autotune.results.trim_rules import (
    TrimStep,
    is_trim_of,
    judge_of,
    measured_rounds,
    proof_of,
    started_alone,
    trim_path,
    unsettled,
)
from autotune.results.tuner_time import STAGES
from autotune.words import counted, interval_bounds, listed

# Why a trim did not end, where none of its races ran.
NO_TRIM = "it did not run"
# The stages a run enters only once its race ended: a run stopped with none of them stopped before its race ended.
AFTER_RACE = frozenset(STAGES[STAGES.index("race") + 1 :])
# The baseline's medians in one study's races of two rounds or more further apart than this, highest over lowest:
# the machine's speed did not hold, and no figure of the study stands. A run on a noisy host reads 0.79-1.25x its
# configuration's median (docs/benchmarks.md, section 13), so a median of two or three runs within about 15 %; a tune
# beside a test suite read the baseline's race medians 162 and 47 samples/s. Not its first run: a single run, and one
# a resumed study may have read on another day, whose drift the races' pairing cancels. (Two races a resumed study
# ran on two days are compared all the same: a speed that changed that much between them is said too.)
UNSTEADY_BASELINE = 1.5


@dataclass(frozen=True)
class Overruled:
    """A configuration that won a race (the finalists' race's winner, or what its trim left), and the trim's race
    ``number`` (from 1) that re-measured it against the baseline in more rounds and did not prove it (``judge_of``:
    it fell short, or left having lost rounds to the baseline): ``race``, that race or the configuration it started
    from alone against the baseline."""

    label: str
    race: Confirmation
    number: int

    @property
    def finalist(self) -> Finalist:
        """Its runs in ``race``."""
        return self.race.entrant(self.label)

    @property
    def speedup(self) -> float:
        """Its median over the baseline's in ``race``, of the rounds it ran."""
        return self.race.ratio(self.finalist)

    @property
    def rounds(self) -> int:
        """The rounds of ``race`` that measured it (``measured_rounds``)."""
        return measured_rounds(self.race, self.label)


@dataclass(frozen=True)
class TakenBack:
    """A configuration the race ``proof`` (at ``number`` in ``Summary.races``) proved, whose gain over the rounds it
    counts (``rounds``: that race's, and those of other races that ran it beside the baseline without choosing it,
    ``paired_rounds``) falls under MIN_GAIN, the other races' counted rounds reading under it too: they take the proof
    back (``GainRounds.takes_proof_back``), and the baseline is kept."""

    label: str
    proof: Confirmation
    number: int
    rounds: GainRounds

    @property
    def finalist(self) -> Finalist:
        """Its runs in ``proof``."""
        return self.proof.entrant(self.label)


def race_index(race: Confirmation, races: list[Confirmation]) -> int:
    """Where ``race`` stands in ``races`` (``Summary.races``); a trim race's configuration alone against the baseline
    (``started_alone``, which may prove it) stands where that race does."""
    return next(index for index, each in enumerate(races) if race in (each, started_alone(each)))


def race_name(index: int) -> str:
    """``Summary.races``' race at ``index`` in words: the finalists' race first, then the trim's, from 1."""
    return "the finalists' race" if index == 0 else f"trim race {index}"


@dataclass(frozen=True)
class Standing:
    """The figure a configuration is ranked by (``Summary.standing``): ``throughput`` (samples/s) and ``speedup``
    over the baseline, and ``measured``, where they come from in words: the race or races and the rounds that count
    there ("the finalists' race, 3 rounds", "the finalists' race and trim race 1, 5 rounds": ``Summary.race_named``),
    "search run" or "baseline run"."""

    throughput: float
    speedup: float
    measured: str


@dataclass(frozen=True)
class Summary:
    """The ranking (``ranked``: by ``standing``, failed last) and the recommendation against the baseline.

    ``confirmation`` is the re-measurement of the finalists, when one was made; ``trim`` the races of its winner
    against its changes undone, ``trim_open`` why they did not end as planned: why the last is ``unsettled`` (cut
    short or left out by study.budget_s or a stopped run, ended by a failed run, left by the configuration it started
    from), or that none ran; None where they ended. Where a race proved the recommendation, the speedup is the
    paired rounds' geometric mean of the rounds of the race that proves it (``proof``: ``proof_of``, which gives the
    verdict) and of every other race round that ran it beside the baseline without choosing it (``gain_runs``), and
    the throughputs the medians of the same rounds (``gain_rounds``), rather than single runs.
    ``batch_policy`` is the study's (``accumulation_steps``). ``ruled_out``: the trials a stale race measured and did
    not prove, or a race stopped before its end dropped, which are not recommended from their single runs.
    ``stopped_before_race_end``: the study's last run stopped (interrupted, a fault) before its race ended, as its
    record of the tuner's time says (no trim stage), or left the study's end to another tuner still at it
    (``RunTime.left_to_others``): running it again races.
    ``budget_left_out``: the steps of the search study.budget_s left out of the study's last run (in words,
    ``RunTime.search_left_out``). ``overruled``: where the race's winner, or what its trim left, won a race but the
    race that re-measured it in most rounds (``judge_of``: a trim race) did not prove it, that race: the baseline is
    kept. ``taken_back``: where a race proved it, but its gain falls under the least a change must gain and the rounds
    of other races it counts read under it too (``TakenBack``): the baseline is kept.
    """

    records: list[TrialRecord]
    baseline: TrialRecord
    recommended: TrialRecord
    confirmation: Confirmation | None = None
    pareto: list[TrialRecord] = field(default_factory=list)
    batch_policy: str = "free"
    trim: list[Confirmation] = field(default_factory=list)
    ruled_out: frozenset[str] = frozenset()
    trim_open: str | None = NO_TRIM
    stopped_before_race_end: bool = False
    budget_left_out: tuple[str, ...] = ()
    overruled: Overruled | None = None
    taken_back: TakenBack | None = None

    @cached_property
    def ranked(self) -> list[TrialRecord]:
        """``records`` (every measured configuration, then the failed), ranked by what the races established: those
        a race measured first (``race_of``), the recommendation (the baseline, where it is kept) leading them, then
        by their race's speedup (``standing``); then the others by their own runs; the failed last, as stored. A
        configuration is ranked once: the trial the recommendation is (``twin``) goes as the recommendation."""
        measured = [record for record in self.records if record.result.ok and record is not self.twin]
        failed = [record for record in self.records if not record.result.ok]

        def rank_key(record: TrialRecord) -> tuple[bool, bool, float]:
            raced = self.race_of(record) is not None
            return not (raced and record is self.recommended), not raced, -self.standing(record).speedup

        return sorted(measured, key=rank_key) + failed

    @cached_property
    def twin(self) -> TrialRecord | None:
        """The measured trial whose configuration the recommendation is, where the recommendation is what a trim left
        (a variant, "1 without batch_size") and not that trial by its label (``twin_of``)."""
        return twin_of(self.records, self.recommended, self.baseline, self.trim)

    def race_of(self, record: TrialRecord) -> Confirmation | None:
        """The race whose figures stand for ``record`` (``standing``), one rule so that no two races' figures reverse
        one race's verdict: the recommendation's and the baseline's, the race that proved the recommendation
        (``proof``; their figures are the headline's, of every round its gain counts); where none did, the baseline's
        is the race that measured it, the finalists' race (else the race of most rounds); any other configuration's,
        the finalists' race where it ran rounds there paired with the baseline's, else the race in which it ran most
        such rounds, the last of those (a trim variant: its trim race); None where no race ran it."""
        if self.proof is not None and (record is self.baseline or record is self.recommended):
            return self.proof
        if record is self.baseline:
            return self._baseline_race
        return self._entrant_races.get(record.label)

    @cached_property
    def _baseline_race(self) -> Confirmation | None:
        """The race that measured the baseline, where none proved a recommendation (``race_of``)."""
        ran = [race for race in self.races if race.rounds]
        if self.confirmation in ran:
            return self.confirmation
        return max(ran, key=lambda race: race.rounds, default=None)

    @cached_property
    def _entrant_races(self) -> dict[str, Confirmation]:
        """Each configuration a race ran in rounds paired with the baseline's → its race by ``race_of``'s rule: the
        finalists' race first, then most such rounds, then the last."""
        best: dict[str, tuple[bool, int, int, Confirmation]] = {}
        for index, race in enumerate(self.races):
            for entrant in race.finalists:
                rounds = len(race.paired(entrant)[0])
                key = (race is self.confirmation, rounds, index, race)
                if rounds and key[:3] > best.get(entrant.label, (False, 0, -1))[:3]:
                    best[entrant.label] = key
        return {label: key[3] for label, key in best.items()}

    def standing(self, record: TrialRecord) -> Standing:
        """The figure ``record`` is ranked by, one rule for every table and chart: from its race (``race_of``), its
        median over the rounds it and the baseline ran and its ratio to the baseline's median over those rounds, as
        the race's own table gives them (``Confirmation.paired_median``, ``Confirmation.ratio``; the baseline at
        1.00); else its own run (measured, though over the memory budget or pruned) against the baseline's own
        run."""
        if record.label not in self._standings:
            self._standings[record.label] = self._standing_of(record)
        return self._standings[record.label]

    @cached_property
    def _standings(self) -> dict[str, Standing]:
        """``standing``'s figures found so far, by label: each is found once."""
        return {}

    def _standing_of(self, record: TrialRecord) -> Standing:
        race = self.race_of(record)
        if self.proof is not None and (record is self.baseline or record is self.recommended):
            return self._gain_standing(record)
        if race is None:
            own = "baseline run" if record is self.baseline else "search run"
            throughput = record.result.timing.throughput
            return Standing(throughput, throughput / self.baseline.throughput, own)
        named = self.race_named(race)
        if record is self.baseline:
            return Standing(race.baseline_median, 1.0, f"{named}, {counted(race.rounds, 'round')}")
        entrant = race.entrant(record.label)
        rounds = len(race.paired(entrant)[0])
        return Standing(race.paired_median(entrant), race.ratio(entrant), f"{named}, {counted(rounds, 'round')}")

    def _gain_standing(self, record: TrialRecord) -> Standing:
        """The recommendation's or the baseline's standing where a race proved the recommendation: the headline's
        medians, over the rounds its gain counts (``gain_rounds``), in the races that gave them."""
        races = listed([race_name(index) for index in self.gain_races])
        measured = f"{races}, {counted(len(self.gain_rounds), 'round')}"
        if record is self.baseline:
            return Standing(self.baseline_throughput, 1.0, measured)
        return Standing(self.recommended_throughput, self.recommended_throughput / self.baseline_throughput, measured)

    def race_named(self, race: Confirmation) -> str:
        """``race`` in words, as the report's sections name it (``race_name``)."""
        return race_name(self.race_index(race))

    def race_index(self, race: Confirmation) -> int:
        """Where ``race`` stands in ``races`` (``race_index``)."""
        return race_index(race, self.races)

    @property
    def trim_steps(self) -> list[TrimStep]:
        """What each of ``trim``'s races left in place, by the trim's rules (``trim_path``), one a race."""
        return trim_path(self.trim)

    @property
    def races(self) -> list[Confirmation]:
        """The finalists' race and the trim's races, in the order they ran (none without a race)."""
        return [self.confirmation, *self.trim] if self.confirmation else []

    @cached_property
    def baseline_readings(self) -> dict[str, float]:
        """The baseline's median samples/s in each race that ran it two rounds or more (``races``, by
        ``race_name``)."""
        return {race_name(index): race.baseline_median for index, race in enumerate(self.races) if race.rounds >= 2}

    @property
    def unsteady(self) -> float | None:
        """How far apart the baseline's readings (``baseline_readings``) are, highest over lowest, where further than
        UNSTEADY_BASELINE: the machine's speed did not hold through the study, so its figures, the gain's too, do
        not stand; None elsewhere."""
        readings = self.baseline_readings.values()
        spread = max(readings) / min(readings) if readings else 1.0
        return spread if spread > UNSTEADY_BASELINE else None

    @cached_property
    def proof(self) -> Confirmation | None:
        """The race that measured the recommendation against the baseline in most rounds (the finalists' race or one
        of the trim; of those, one it won), where it won it (``proof_of``): a trim race also proves the configuration
        it started from; None for the baseline or a recommendation from single runs."""
        return None if self.is_baseline else proof_of(self.recommended.label, self.races)

    @property
    def confirmed(self) -> bool:
        return self.proof is not None

    @cached_property
    def gain_runs(self) -> GainRounds:
        """The rounds of the race that proves the recommendation (``proof``) and every other round of ``races`` that
        ran it beside the baseline without choosing it (``paired_rounds``); none without a proof. Its gain and the
        figures beside it are of these rounds (``gain_rounds``)."""
        proof = self.proof
        return paired_rounds(self.race_index(proof), proof.winner.label, self.races) if proof else GainRounds((), 0)

    @property
    def recommended_throughput(self) -> float:
        """The recommendation's samples/s: the median of its runs in the rounds its gain counts (``gain_rounds``),
        else its own single run."""
        if not self.confirmed:
            return self.recommended.throughput
        return statistics.median(paired.recommended for paired in self.gain_runs.of(self.gain_rounds))

    @property
    def baseline_throughput(self) -> float:
        """The baseline's samples/s, as ``recommended_throughput`` reads the recommendation's."""
        if not self.confirmed:
            return self.baseline.throughput
        return statistics.median(paired.baseline for paired in self.gain_runs.of(self.gain_rounds))

    @property
    def gain_rounds(self) -> list[int]:
        """The rounds of ``gain_runs`` (by number, from 1) the gain counts (``GainRounds.counted``: a round in which
        something beside a run slowed it may be left out); none without a race. The figures stated beside the gain,
        the two throughputs' medians and their peak memories, are of these rounds: a ratio of medians read beside the
        paired rounds' geometric mean is of the same runs."""
        return list(self.gain_ratios)

    @cached_property
    def gain_ratios(self) -> dict[int, float]:
        """The recommendation's throughput over the baseline's, by round of ``gain_runs``, of the rounds its gain
        counts; none without a race."""
        return self.gain_runs.counted()

    def gain_rounds_named(self, numbers: list[int]) -> str:
        """Rounds of ``gain_runs`` in words, as the races' tables number them (``GainRounds.named``)."""
        return self.gain_runs.named(numbers, race_name)

    @property
    def gain_races(self) -> list[int]:
        """The races (indexes in ``races``) whose rounds give the gain (``gain_runs``)."""
        return self.gain_runs.races

    @cached_property
    def _race_peak_memories(self) -> tuple[float | None, float | None]:
        """The medians of the baseline's and the recommendation's race runs' peak memories in the rounds the gain
        counts (``median_memory``: None where none was read, as in a race stored before they were kept); both None
        without a race."""
        if self.proof is None:
            return None, None
        rounds = self.gain_runs.of(self.gain_rounds)
        baseline = median_memory([paired.baseline_memory for paired in rounds])
        return baseline, median_memory([paired.recommended_memory for paired in rounds])

    @property
    def race_peak_memories(self) -> bool:
        """Whether the peak memories below are the races' medians: the races that gave the gain (``gain_runs``) kept
        their runs' peak memories (one stored before races kept them did not)."""
        return None not in self._race_peak_memories

    @property
    def recommended_peak_memory_mb(self) -> float:
        """The recommendation's peak memory (MiB), from the runs its throughput comes from: the median of its runs in
        the rounds its gain counts (``race_peak_memories``), else its own single run."""
        if self.race_peak_memories:
            return self._race_peak_memories[1]
        return self.recommended.result.peak_memory_mb

    @property
    def baseline_peak_memory_mb(self) -> float:
        """The baseline's peak memory (MiB), as ``recommended_peak_memory_mb`` reads the recommendation's."""
        if self.race_peak_memories:
            return self._race_peak_memories[0]
        return self.baseline.result.peak_memory_mb

    @property
    def throughput_basis(self) -> str:
        """Where the two throughputs above come from, in words."""
        if self.confirmed and len(self.gain_runs.rounds) == 1:
            return "one interleaved re-measurement"
        if self.confirmed:
            races = self.gain_runs.by_race(race_name)
            return f"medians of {self.gain_rounds_said} interleaved re-measurements{races}{self.left_out_note}"
        return "single measurements"

    @property
    def speedup_basis(self) -> str:
        """How ``speedup`` was found, in words, with its interval where it has one."""
        interval = self.gain_interval
        if interval is None:
            return "the ratio of the two throughputs"
        return (
            f"the geometric mean of {interval.n} paired rounds' ratios{self.left_out_note}, 95 % interval "
            f"{interval_bounds(interval.low, interval.high, 'x')}"
        )

    @property
    def gain_interval(self) -> RatioInterval | None:
        """The 95 % interval of the recommendation's gain: the geometric mean of its throughput over the baseline's,
        round by round, over the rounds of ``gain_runs`` (each ran the two close together, so pairing them cancels
        the machine's slower drifts), with Student's t interval; None without a race proving it
        (``proof``) or with one round. A round in which something beside one of the two runs slowed it is left out
        where three rounds or more, and at least half of them, are left (``GainRounds.counted``:
        ``gain_rounds_left_out``)."""
        return ratio_interval(list(self.gain_ratios.values())) if self.proof else None

    @property
    def gain_rounds_left_out(self) -> list[int]:
        """The rounds of ``gain_runs`` left out of ``gain_interval``, as something beside a run of the
        recommendation or the baseline slowed it."""
        return self.gain_runs.left_out

    @property
    def gain_counts_slowed(self) -> list[int]:
        """The rounds the gain counts (``gain_rounds``) in which something beside a run of the recommendation or the
        baseline slowed it: too few rounds stay quiet, so none was left out (``quiet_rounds``), and the gain reads the
        load too; none elsewhere."""
        slowed = self.gain_runs.slowed
        return [number for number in self.gain_rounds if number in slowed]

    @property
    def gain_unreliable(self) -> bool:
        """Whether the gain, counting slowed rounds (``gain_counts_slowed``), is unreliable, not a little off
        (``counted_slowed_unreliable``: most of its rounds slowed, or other processes took a run's cores or GPU)."""
        counted = self.gain_counts_slowed
        if not counted:
            return False
        rounds = self.gain_runs.rounds
        runs = [(number, disturbance) for number, paired in enumerate(rounds, 1) for disturbance in paired.disturbed]
        return counted_slowed_unreliable(counted, len(rounds), runs)

    @property
    def gain_rounds_said(self) -> str:
        """How many of ``gain_runs``' rounds the gain counts, in words: "4 of 5" where some were left out, else
        "5"."""
        counted_rounds, rounds = len(self.gain_rounds), len(self.gain_runs.rounds)
        return f"{counted_rounds} of {rounds}" if self.gain_rounds_left_out else f"{counted_rounds}"

    @property
    def left_out_note(self) -> str:
        """``gain_rounds_left_out`` in words, to follow the paired rounds counted: " (round 2 left out: a run of it
        was slowed)"; empty where none was."""
        return self.gain_runs.left_out_note(race_name)

    @property
    def no_difference(self) -> dict[str, object]:
        """The changes the race's winner made that undoing cost nothing beyond noise (``trim``), so they are not
        recommended: name → the value tried."""
        if not self.trim or self.is_baseline:
            return {}
        tried, kept = self.trim[0].finalists[0].knobs, self.recommended.result.knobs
        return {name: value for name, (_, value) in changed(tried, kept).items()}

    @property
    def untrimmed(self) -> bool:
        """Whether the recommendation, changing two knobs or more, stands without a whole trim: unconfirmed (no race
        re-measured it, so no trim ran), or confirmed with its trim left out or cut short by study.budget_s, ended by
        a failed run, stopped before or in it, left by the recommendation (``trim_open`` says which), or still
        running in another tuner. Some of its changes may do nothing; a later run goes on with the trim."""
        if len(self.changed_knobs()) < 2:
            return False
        return not self.confirmed or self.trim_open is not None

    @property
    def speedup(self) -> float:
        """The recommendation's gain: over two race rounds or more, the centre of ``gain_interval`` (the paired
        rounds' geometric mean, which cancels the machine's drifts as the interval does, where a ratio of medians
        may even fall outside it); else the ratio of the two throughputs."""
        interval = self.gain_interval
        return interval.geomean if interval is not None else self.recommended_throughput / self.baseline_throughput

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
        return changed(self.recommended.result.knobs, self.baseline.result.knobs)


def twin_of(
    records: list[TrialRecord], recommended: TrialRecord, baseline: TrialRecord, trim: list[Confirmation]
) -> TrialRecord | None:
    """Of ``records``, the measured trial whose configuration ``recommended`` is, where it is what a ``trim`` left
    (a variant) and not that trial by its label: its search run stands beside the variant's race figures in no table
    (``Summary.ranked``, the Pareto front); None elsewhere."""
    if recommended is baseline or not trim:
        return None
    knobs = recommended.result.knobs
    same = (r for r in records if r.result.ok and r.label != recommended.label and r.result.knobs == knobs)
    return next(same, None)


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
    """Sort every record by its own run (failed last; the ranking is ``Summary.ranked``) and recommend: the winner of
    the confirmation when the finalists were re-measured (the baseline when none won), else the candidate chosen
    from single runs (``choose_candidate``), leaving out the finalists a stale confirmation (``is_current``) ran
    and did not prove, and those a race stopped before its end dropped. A recommendation is never a change that
    re-measured no faster, nor one whose gain falls under the least a change must gain where the rounds of other races
    than the one that proved it, which did not choose it, read under it too (``TakenBack``).
    """
    if results.baseline is None or not results.baseline.result.ok:
        raise ValueError("a summary needs a measured baseline")
    measured = [r for r in results.records if r.result.ok]
    failed = [r for r in results.records if not r.result.ok]
    records = sorted(measured, key=lambda r: -r.throughput) + failed
    confirmation = results.confirmation
    ruled_out: frozenset[str] = frozenset()
    overruled: Overruled | None = None
    taken_back: TakenBack | None = None
    if confirmation is not None and not confirmation.is_current(results.baseline, results.trials):
        ruled_out = _ruled_out(confirmation)
        confirmation = None
    trim: list[Confirmation] = []
    trim_open: str | None = NO_TRIM
    runs = results.tuner_time.runs if results.tuner_time else []
    # The last run to end the study, or try: one that left it to another tuner still at it (started before or after
    # it) says nothing of the race unless no other run did.
    last = next((run for run in reversed(runs) if not run.left_to_others), runs[-1] if runs else None)
    stopped_before_race_end = (
        last is not None and (not last.finished or last.left_to_others) and not AFTER_RACE & last.stages.keys()
    )
    if confirmation is not None and confirmation.cut and stopped_before_race_end:
        # Stored round by round, a race stopped (or still running) decides nothing yet, but those it dropped left
        ruled_out, confirmation = _left(confirmation), None
    if confirmation is None:
        candidates = [r for r in results.trials if r.label not in ruled_out]
        recommended = choose_candidate(results.baseline, candidates) or results.baseline
    elif (winner := confirmation.winner) is None:
        recommended = results.baseline
    else:
        recommended = next(r for r in results.trials if r.label == winner.label)
        if is_trim_of(results.trim, confirmation):  # else about an older winner, or other rounds
            trim = [race for race in results.trim if race.rounds or not race.cut]  # none run: left out, not a race
            trim_open = unsettled(results.trim[-1])
        steps = trim_path(trim)
        ended = next((index for index, step in enumerate(steps, 1) if step.ends), None)
        if ended is not None:  # the races stored after the one the trim ended at are no steps of it
            trim, steps, trim_open = trim[:ended], steps[:ended], unsettled(trim[ended - 1])
        final = next((step.left for step in reversed(steps) if step.left), winner)
        races = [confirmation, *trim]
        if (proof := proof_of(final.label, races)) is None:
            recommended, overruled = results.baseline, _overruled(final.label, confirmation, trim)
        elif (taken_back := _taken_back(final.label, proof, races)) is not None:
            recommended = results.baseline
        elif final.label != winner.label:
            recommended = TrialRecord(final.label, final.result)
            records = sorted([*measured, recommended], key=lambda r: -r.throughput) + failed
    twin = twin_of(records, recommended, results.baseline, trim)
    pareto = pareto_front([r for r in records if r is not twin]) if "peak_memory" in results.objectives else []
    return Summary(
        records,
        results.baseline,
        recommended,
        confirmation,
        pareto,
        results.batch_policy,
        trim,
        ruled_out,
        trim_open,
        stopped_before_race_end,
        tuple(last.search_left_out) if last else (),
        overruled,
        taken_back,
    )


def _taken_back(label: str, proof: Confirmation, races: list[Confirmation]) -> TakenBack | None:
    """``label``, proven by ``proof`` among ``races``, where the rounds its gain counts take that proof back
    (``GainRounds.takes_proof_back``); else None."""
    number = race_index(proof, races)
    rounds = paired_rounds(number, label, races)
    return TakenBack(label, proof, number, rounds) if rounds.takes_proof_back else None


def _overruled(label: str, confirmation: Confirmation, trim: list[Confirmation]) -> Overruled:
    """``label``'s judge (``judge_of``), which did not prove it, as an ``Overruled``: a race of the trim, for the
    finalists' race proves its own winner and holds no variant of it."""
    races = [confirmation, *trim]
    race = judge_of(label, races)
    return Overruled(label, race, race_index(race, races))


def _left(race: Confirmation) -> frozenset[str]:
    """The finalists ``race``, stopped before its end, dropped (they lost a round to the baseline, fell behind, or
    a run of theirs failed): none where its baseline never ran or failed; not one left to a trim before the race
    (``Left.TRIMMED``: nothing measured it)."""
    if not race.rounds or race.failure:
        return frozenset()
    return frozenset(f.label for f in race.finalists if f.dropped and f.left is not Left.TRIMMED)


def _ruled_out(stale: Confirmation) -> frozenset[str]:
    """The finalists ``stale`` measured and did not prove: none where its baseline never ran or failed, nor those it
    was cut short of proving (``short_of_rounds``: it said nothing of them yet)."""
    if not stale.rounds or stale.failure:
        return frozenset()
    unproven = [f for f in stale.finalists if f.throughputs and not stale.proven(f)]
    return frozenset(f.label for f in unproven if not stale.short_of_rounds(f))
