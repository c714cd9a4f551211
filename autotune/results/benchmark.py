"""What ``mode=benchmark`` measured: the baseline, the recommendation, and each change alone and left out, run by run.

Its rules are written here once. A configuration's ratio to the baseline is the geometric mean of its per-round
ratios (each round runs every configuration once, in processes of their own, so pairing by round cancels the machine's
slower drifts), with Student's t 95 % interval on their logarithms (``ratio_interval``). The verdict: a gain when
the interval lies above 1, a loss when it lies below, within noise when it spans 1, and too few rounds where fewer
than two rounds ran both the configuration and the baseline (a run that failed, or one stopped). A change left
out of the recommendation is measured against the recommendation too, by the same rule: a loss there is a change
that matters; within noise, one not shown to. A benchmark stopped before its last round (``Benchmark.stopped``)
decides nothing: its record's verdict on each configuration is stopped (``Benchmark.recorded_verdict``), as a stopped
self-check's is; its ratios and intervals are what the rounds that ran read, provisional. A round in which something
beside one of the two runs slowed it is left out of their ratio, unless too few rounds stay quiet (``quiet_rounds``):
then every round counts, and the pages say the figure may be off.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from autotune.knobs import changed, undo
from autotune.measure.stats import RatioInterval, quiet_rounds, ratio_interval
from autotune.results.race_rules import counted_slowed_unreliable
from autotune.trial.result import Disturbance

# What an entry is: the two ends, or one change from the recommendation on top of the baseline, or left out of it.
KINDS = ("baseline", "recommended", "alone", "without")
# The verdict a record states on what it measured where its rounds did not all run (``unless_stopped``).
STOPPED = "stopped"


def unless_stopped(verdict: str, stopped: bool) -> str:
    """The verdict a record (a benchmark's, a check's, a self-check's) states: STOPPED where its rounds did not all
    run (an interrupt, an error), since what the rounds that ran read decides nothing; else ``verdict``, what they
    read."""
    return STOPPED if stopped else verdict


def without_computed(data: dict[str, Any], written: Iterable[str], record_type: type) -> dict[str, Any]:
    """``data``, a record of the dataclass ``record_type`` as read, less the keys its ``to_dict`` writes
    (``written``) beyond its fields: those it computes from them, which its ``from_dict`` does not read back. Any
    other key stays, for the constructor to refuse one it does not know (a newer autotune's): TypeError naming it."""
    computed = set(written) - {item.name for item in fields(record_type)}
    return {key: value for key, value in data.items() if key not in computed}


@dataclass(frozen=True)
class Entry:
    """One configuration of the benchmark: ``kind`` (KINDS) and the ``knob`` it is about (alone, without), its knob
    values, and per round its samples/s and peak memory (None where that run failed), a line per failure, and by
    round what slowed a run counted though something beside it slowed it (``autotune/study/disturbed.py``)."""

    label: str
    kind: str
    knob: str | None
    knobs: dict[str, Any]
    throughputs: list[float | None] = field(default_factory=list)
    peak_memory_mb: list[float | None] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    disturbed: dict[int, Disturbance] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Entry:
        """``data`` as ``Benchmark.to_dict`` wrote it; earlier versions stored the disturbed runs as lines of words
        ("round 2: 0.8 cores")."""
        stored = data.get("disturbed") or {}
        if isinstance(stored, list):
            stored = dict(line.removeprefix("round ").split(": ", 1) for line in stored)
        disturbed = {int(index): Disturbance.from_dict(value) for index, value in stored.items()}
        return cls(**{**data, "disturbed": disturbed})

    @property
    def median(self) -> float | None:
        measured = [value for value in self.throughputs if value is not None]
        return statistics.median(measured) if measured else None

    @property
    def median_peak_mb(self) -> float | None:
        measured = [value for value in self.peak_memory_mb if value is not None]
        return statistics.median(measured) if measured else None


@dataclass(frozen=True)
class TunedGain:
    """What the recommendation's file says it measured when tuned: its ``speedup`` over the baseline and, where a
    race's paired rounds gave it, their 95 % ``interval`` (None: single runs or one round)."""

    speedup: float
    interval: RatioInterval | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TunedGain:
        """``data`` as ``Benchmark.to_dict`` wrote it."""
        interval = data.get("interval")
        return cls(data["speedup"], RatioInterval(**interval) if interval else None)

    def agrees_with(self, now: RatioInterval) -> bool | None:
        """Whether the gain measured ``now`` agrees with this one within noise: their intervals overlap; None where
        this one has none (single runs, or one race round: its own noise unknown, so no verdict either way)."""
        if self.interval is None:
            return None
        return self.interval.low <= now.high and now.low <= self.interval.high


@dataclass(frozen=True)
class Benchmark:
    """A benchmark of the recommendation in ``recommended`` (a path) for ``pipeline`` on ``device``, ``rounds``
    interleaved rounds; ``entries`` start with the baseline. ``notes`` say what the reader should know (the file
    measured on another machine, tuned against another baseline). ``batch_policy``: how its runs trained (as the
    recommendation was tuned: search.batch_policy; None in a record written before it was kept). ``stopped``: its
    rounds did not all run (an interrupt, an error), so it decides nothing (``recorded_verdict``; False in a record
    written before it was kept)."""

    pipeline: str
    device: str
    rounds: int
    recommended: str
    machine: dict[str, Any]
    entries: list[Entry]
    notes: list[str] = field(default_factory=list)
    batch_policy: str | None = None
    stopped: bool = False
    tuned: TunedGain | None = None

    @property
    def baseline(self) -> Entry:
        return self.entries[0]

    @property
    def recommendation(self) -> Entry | None:
        return next((entry for entry in self.entries if entry.kind == "recommended"), None)

    @property
    def complete_rounds(self) -> int:
        """The rounds in which every configuration's run ended, failed ones too."""
        return min((len(entry.throughputs) for entry in self.entries), default=0)

    @property
    def changes(self) -> list[str]:
        """The knobs the recommendation changes from the baseline (``knobs.changed``), whose shares are measured."""
        rec = self.recommendation
        return list(changed(rec.knobs, self.baseline.knobs)) if rec is not None else []

    def share(self, knob: str) -> tuple[Entry | None, Entry | None]:
        """The entries measuring ``knob``'s change alone on top of the baseline and the recommendation without it:
        where one is an end, that end (alone, the recommendation; left out, the baseline: workers left out take
        their options along); None where there is none (alone, an option of workers without them is the baseline:
        it applies only with another change; or values that cannot run together)."""
        base, rec = self.baseline, self.recommendation
        alone = next((e for e in self.entries if e.kind == "alone" and e.knob == knob), None)
        without = next((e for e in self.entries if e.kind == "without" and e.knob == knob), None)
        if rec is not None and alone is None and share_knobs(base.knobs, rec.knobs, knob, "alone") == rec.knobs:
            alone = rec
        if rec is not None and without is None and share_knobs(base.knobs, rec.knobs, knob, "without") == base.knobs:
            without = base
        return alone, without

    def paired_ratios(self, entry: Entry, reference: Entry | None = None) -> dict[int, float]:
        """``entry``'s samples/s over ``reference``'s (the baseline's where None), by round, in every round both
        ran."""
        other = reference or self.baseline
        pairs = enumerate(zip(entry.throughputs, other.throughputs, strict=False), start=1)
        return {index: a / b for index, (a, b) in pairs if a is not None and b is not None}

    def slowed_rounds(self, entry: Entry, reference: Entry | None = None) -> list[int]:
        """The rounds of ``paired_ratios`` in which something beside ``entry``'s run or ``reference``'s (the
        baseline's where None) slowed it."""
        other = reference or self.baseline
        return sorted(set(self.paired_ratios(entry, reference)) & (set(entry.disturbed) | set(other.disturbed)))

    def counted_ratios(self, entry: Entry, reference: Entry | None = None) -> dict[int, float]:
        """``paired_ratios`` by round, of the rounds in which something beside them slowed neither run, unless too few
        of those are left (``quiet_rounds``)."""
        return quiet_rounds(self.paired_ratios(entry, reference), set(self.slowed_rounds(entry, reference)))

    def ratios(self, entry: Entry, reference: Entry | None = None) -> list[float]:
        """``counted_ratios``' ratios, round by round."""
        return list(self.counted_ratios(entry, reference).values())

    def rounds_left_out(self, entry: Entry, reference: Entry | None = None) -> list[int]:
        """The ``slowed_rounds`` that ``ratios`` leave out: all of them, or none where too few rounds stay quiet."""
        counted = self.counted_ratios(entry, reference)
        return [index for index in self.slowed_rounds(entry, reference) if index not in counted]

    def counts_slowed(self, entry: Entry, reference: Entry | None = None) -> bool:
        """Whether ``ratios`` count rounds something slowed (too few rounds stay quiet: ``quiet_rounds``), so that they
        read what the load did as well as the configurations."""
        return bool(self.slowed_rounds(entry, reference)) and not self.rounds_left_out(entry, reference)

    def counts_slowed_unreliably(self, entry: Entry, reference: Entry | None = None) -> bool:
        """Whether ``ratios``, counting slowed rounds (``counts_slowed``), are unreliable, not a little off
        (``counted_slowed_unreliable``: most rounds slowed, or other processes took a run's cores or GPU)."""
        if not self.counts_slowed(entry, reference):
            return False
        runs = [*entry.disturbed.items(), *(reference or self.baseline).disturbed.items()]
        rounds = len(self.paired_ratios(entry, reference))
        return counted_slowed_unreliable(self.slowed_rounds(entry, reference), rounds, runs)

    def counted_medians(self, entry: Entry, reference: Entry | None = None) -> tuple[float, float]:
        """``entry``'s median samples/s and ``reference``'s (the baseline's where None), of the rounds ``ratios``
        count (``counted_ratios``, one at least): a ratio of medians said beside their geometric mean is of the same
        runs, not of a round one of the two ran alone (the other's run failed) or that was left out as slowed."""
        rounds = self.counted_ratios(entry, reference)
        runs = (entry.throughputs, (reference or self.baseline).throughputs)
        ours, theirs = (statistics.median(each[index - 1] for index in rounds) for each in runs)
        return ours, theirs

    def interval(self, entry: Entry, reference: Entry | None = None) -> RatioInterval | None:
        return ratio_interval(self.ratios(entry, reference))

    def verdict(self, entry: Entry, reference: Entry | None = None) -> str:
        """What its rounds read of ``entry`` against ``reference`` (the baseline where None): gain, loss, within noise
        (the interval spans 1), or too few rounds (for an interval: the module's rule); the benchmark's verdict on it
        is ``recorded_verdict``."""
        interval = self.interval(entry, reference)
        if interval is None:
            return "too few rounds"
        if interval.low > 1:
            return "gain"
        if interval.high < 1:
            return "loss"
        return "within noise"

    def recorded_verdict(self, entry: Entry, reference: Entry | None = None) -> str:
        """The benchmark's verdict on ``entry`` against ``reference`` (the baseline where None), as its record and
        pages state it: what its rounds read (``verdict``), unless it stopped before its last round
        (``unless_stopped``)."""
        return unless_stopped(self.verdict(entry, reference), self.stopped)

    def memory_change(self, entry: Entry) -> float | None:
        """``entry``'s median peak memory over the baseline's."""
        peak, base = entry.median_peak_mb, self.baseline.median_peak_mb
        return peak / base if peak is not None and base else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for row, entry in zip(data["entries"], self.entries, strict=True):
            interval = self.interval(entry)
            row.update(
                ratios=self.ratios(entry),
                slowed_rounds=self.slowed_rounds(entry),
                rounds_left_out=self.rounds_left_out(entry),
                interval=asdict(interval) if interval else None,
                verdict=None if entry is self.baseline else self.recorded_verdict(entry),  # the baseline against itself
                memory_change=self.memory_change(entry),
            )
            if entry.kind == "without" and self.recommendation is not None:
                against = self.interval(entry, self.recommendation)
                row.update(
                    to_recommended=asdict(against) if against else None,
                    to_recommended_verdict=self.recorded_verdict(entry, self.recommendation),
                )
        data["shares"] = {  # the entry measuring each change alone and left out (``share``), by its label
            knob: dict(zip(("alone", "without"), (e.label if e else None for e in self.share(knob)), strict=True))
            for knob in self.changes
        }
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Benchmark:
        """The record ``to_dict`` wrote, the keys it computes dropped (``without_computed``); TypeError naming a key
        it does not know."""
        written = blank_benchmark().to_dict()
        written_by_entry = {key for row in written["entries"] for key in row}
        entries = [Entry.from_dict(without_computed(row, written_by_entry, Entry)) for row in data["entries"]]
        tuned = TunedGain.from_dict(data["tuned"]) if data.get("tuned") else None
        return cls(**{**without_computed(data, written, Benchmark), "entries": entries, "tuned": tuned})


def blank_benchmark() -> Benchmark:
    """A benchmark of no rounds with an entry of each of KINDS: its ``to_dict`` writes every key one writes (they
    are the same whatever its figures, an entry's by its kind), for ``from_dict`` to tell those it computes."""
    return Benchmark("", "", 0, "", {}, [Entry(kind, kind, None, {}) for kind in KINDS])


def share_knobs(baseline: dict[str, Any], recommended: dict[str, Any], knob: str, kind: str) -> dict[str, Any]:
    """The knobs measuring ``knob``'s share of the recommendation, of ``kind``: "alone", the baseline with its change
    alone (options of workers not taken along: alone they apply only with another change); "without", the
    recommendation with it undone (undone workers take their options along)."""
    if kind == "alone":
        return undo(baseline, recommended, knob, options_too=False)
    return undo(recommended, baseline, knob)
