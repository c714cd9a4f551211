"""What advice is and what it is read against: one thing to change (``Advice``), and what a stored tuning study
measured (``Tried``)."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.results import race_rules


@dataclass(frozen=True)
class Tried:
    """What a stored tuning study measured: its name, per knob the values its configurations ran with, the
    changes its recommendation makes to the baseline (``recommended``: knob → value; None where the study has no
    recommendation to read), per change of one knob (``twin_key``: ``KNOB=FROM->TO``) the throughput of each
    configuration it measured with TO over that of one it measured alike but for that knob, at FROM (``twins``:
    single runs), the changes its races raced with the recommendation's changes and left out, no faster beyond noise
    (``left_out``: knob → value),
    the samples/s of the DataLoader alone its probe read per batch size and worker count (``loaders``, by
    ``loader_key``), the values its recommendation keeps from the baseline (``kept``: knob → value; the whole
    baseline where it recommends keeping it), per knob the values its races ran (``raced``: the finalists'
    race's and its trim's; None in a profile stored before they were recorded: unknown), and per knob at a value
    (``value_key``: ``KNOB=VALUE``) the throughput of each configuration it measured with that value over the
    baseline's (``against_baseline``: single runs; the baseline's own, 1.0, among them)."""

    study: str
    values: dict[str, list[Any]]
    recommended: dict[str, Any] | None = None
    twins: dict[str, list[float]] = field(default_factory=dict)
    left_out: dict[str, Any] = field(default_factory=dict)
    loaders: dict[str, float] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)
    raced: dict[str, list[Any]] | None = None
    against_baseline: dict[str, list[float]] = field(default_factory=dict)

    def says(self, knob: str, value: Any, now: Any = None) -> str:
        """Whether the study measured ``knob`` at ``value``, and recommends it, in words; and what changing it from
        ``now`` to ``value`` read where the study measured both alike. A value it measured but neither recommends
        nor keeps is "not recommended" only where its races ran it (``raced``): else no race weighed it, and the
        words say it was not raced."""
        seen = self.values.get(knob, [])
        if self.recommended is not None and knob in self.recommended and self.recommended[knob] == value:
            return f"the tuner recommends {knob}={value} (study '{self.study}')"
        if knob in self.kept and self.kept[knob] == value:
            return (
                f"the tuner's recommendation keeps {knob}={value} (study '{self.study}'){self._twins(knob, now, value)}"
            )
        if self.left_out_of_recommendation(knob, value):
            return (
                f"the tuner raced {knob}={value} with its recommendation's changes and left it out, no faster beyond "
                f"noise (study '{self.study}')"
            )
        if value in seen:
            read = f" at {measured}" if (measured := self.measured(knob, now, value)) else ""
            return f"the tuner measured {knob}={value}{read}{self._verdict(knob, value)} (study '{self.study}')"
        listed = ", ".join(map(str, seen)) or "no value"
        return f"not tried by the tuner: study '{self.study}' measured {knob} at {listed}"

    def _verdict(self, knob: str, value: Any) -> str:
        """What the study's races made of ``knob`` at ``value``, measured but not recommended, in words: "" where
        it has no recommendation or did not record its races."""
        if self.recommended is None or self.raced is None:
            return ""
        return " and did not recommend it" if value in self.raced.get(knob, []) else " and did not race it"

    def _twins(self, knob: str, now: Any, value: Any) -> str:
        measured = self.measured(knob, now, value)
        return f": {measured}" if measured else ""

    def measured(self, knob: str, now: Any, value: Any) -> str:
        """What the study read of changing ``knob`` from ``now`` to ``value``, alike but for it (``twins``), in words
        ("1.00x the same settings with num_workers=0 (one pair of single runs)"; of two pairs or more, their median,
        range, and "within noise" where the race would call it a tie: ``within_noise``); where it measured no such
        pair, what it read of ``value`` against the baseline where that was slower beyond noise
        (``_slower_than_baseline``); else ""."""
        ratios = self.twins.get(twin_key(knob, now, value), [])
        if not ratios:
            return self._slower_than_baseline(knob, value)
        median = statistics.median(ratios)
        if len(ratios) == 1:
            pairs = "one pair of single runs"
        else:
            noise = "; within noise" if within_noise(median) else ""
            pairs = f"median of {len(ratios)} pairs of single runs, {min(ratios):.2f}x to {max(ratios):.2f}x{noise}"
        return f"{median:.2f}x the same settings with {knob}={now} ({pairs})"

    def no_gain(self, knob: str, now: Any, value: Any) -> bool:
        """Whether the study measured changing ``knob`` from ``now`` to ``value`` no faster beyond noise, as the
        race calls a finalist faster (by more than ``race_rules.TIE_TOLERANCE``), by the median of two pairs or more
        measured alike but for it (``twins``), as ``measured`` prints it; by one pair, only where it read slower by
        ``race_rules.MIN_GAIN`` or more: single runs vary by 6 to 20 % (docs/profile.md), so one pair tells neither a
        small gain nor a small loss from none. Where it measured no such pair, whether it measured ``value`` slower
        than the baseline beyond noise (``measured_slower``): a pair alike but for the knob tells its own effect, a
        configuration that changes others too does not, so the pairs decide where there are any."""
        ratios = self.twins.get(twin_key(knob, now, value), [])
        if not ratios:
            return self.measured_slower(knob, value)
        median = round(statistics.median(ratios), 2)
        return median <= 1 + race_rules.TIE_TOLERANCE if len(ratios) > 1 else median <= 1 - race_rules.MIN_GAIN

    def measured_slower(self, knob: str, value: Any) -> bool:
        """Whether every configuration the study measured with ``knob`` at ``value`` (``against_baseline``, one at
        least) read slower than the baseline beyond a single run's noise: more than ``race_rules.FINALIST_WINDOW``
        under it, as printed (to 0.01), the window within which a single run may still be the fastest. A value
        measured so in one configuration and not in another is not: the others it changed may be what was slow."""
        ratios = self.against_baseline.get(value_key(knob, value), [])
        return bool(ratios) and all(round(ratio, 2) < 1 - race_rules.FINALIST_WINDOW for ratio in ratios)

    def _slower_than_baseline(self, knob: str, value: Any) -> str:
        """What the study read of ``knob`` at ``value`` against the baseline, in words, where it measured it slower
        beyond noise (``measured_slower``): "0.10x to 0.16x the baseline (single runs of the 2 configurations with
        it, each more than 15% under the baseline's: beyond a single run's noise)"; "" otherwise."""
        if not self.measured_slower(knob, value):
            return ""
        ratios = self.against_baseline[value_key(knob, value)]
        low, high = f"{min(ratios):.2f}x", f"{max(ratios):.2f}x"
        window = f"more than {race_rules.FINALIST_WINDOW:.0%} under the baseline's: beyond a single run's noise"
        if len(ratios) == 1:
            return f"{low} the baseline (a single run of the one configuration with it, {window})"
        span = low if low == high else f"{low} to {high}"
        return f"{span} the baseline (single runs of the {len(ratios)} configurations with it, each {window})"

    def left_out_of_recommendation(self, knob: str, value: Any) -> bool:
        """Whether the study's races raced setting ``knob`` to ``value`` with its recommendation's changes and left it
        out."""
        return knob in self.left_out and self.left_out[knob] == value

    def settled(self, knob: str, knobs: dict[str, Any], value: Any) -> bool:
        """Whether the study's races already chose, for a configuration of ``knobs``, against setting ``knob`` to
        ``value`` (no advice to set it is then given): ``knobs`` make the recommendation's change of ``knob`` and
        the study measured ``value`` too (the tuner chose among the values it measured; a value it never measured,
        such as a batch beyond its largest, is advised), or ``knobs`` make every change of the recommendation and
        its races left ``value`` out (``left_out``)."""
        if self.recommended is None:
            return False
        runs_recommendation = all(knobs.get(name) == after for name, after in self.recommended.items())
        if runs_recommendation and self.left_out_of_recommendation(knob, value):
            return True
        return (
            knob in self.recommended
            and knobs.get(knob) == self.recommended[knob]
            and value in self.values.get(knob, [])
        )


def within_noise(ratio: float) -> bool:
    """Whether ``ratio`` of two configurations' throughputs, as printed (to 0.01), is a tie by the race's rule: no
    faster beyond ``race_rules.TIE_TOLERANCE`` either way."""
    return 1 - race_rules.TIE_TOLERANCE <= round(ratio, 2) <= 1 + race_rules.TIE_TOLERANCE


def loader_key(batch_size: int, num_workers: int) -> str:
    """``Tried.loaders``' key of the DataLoader at ``batch_size`` with ``num_workers`` workers."""
    return f"batch_size={batch_size} num_workers={num_workers}"


def value_key(knob: str, value: Any) -> str:
    """``Tried.against_baseline``' key of ``knob`` at ``value``."""
    return f"{knob}={value}"


def twin_key(knob: str, before: Any, after: Any) -> str:
    """``Tried.twins``' key of ``knob`` changed from ``before`` to ``after``."""
    return f"{knob}={before}->{after}"


@dataclass(frozen=True)
class Advice:
    """One thing to change: ``action``, the measurement behind it (``why``), its expected ``effect`` and, where
    the measurements give one, the speedup it can bring at most (``gain``, the ranking's key); the ``knob`` that
    does it (and whether the tuner ``tried`` it), or the user's code ``location`` to change. ``measured_no_gain``: the
    stored study measured the change no faster beyond noise (``Tried.no_gain``: alike but for its knob, or where it
    measured no such pair, slower than the baseline in every configuration with it): it is ranked last, and is never
    the advice to follow next (``first_to_follow``)."""

    action: str
    why: str
    effect: str
    gain: float | None = None
    knob: str | None = None
    tried: str | None = None
    location: str | None = None
    measured_no_gain: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
