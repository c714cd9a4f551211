"""What a stored tuning study tried, for the advice of a profiled configuration (``Tried``)."""

from __future__ import annotations

import itertools

from autotune.records import TrialRecord
from autotune.results.model import StudyResults
from autotune.results.remedies import Tried, twin_key
from autotune.results.summary import summarise


def tries_of(results: StudyResults) -> Tried:
    """What study ``results`` measured, per knob, the changes its recommendation makes (None without a measured
    baseline, which a recommendation needs), and its configurations measured alike but for one knob (``twins``)."""
    values: dict[str, list] = {}
    for record in results.records:
        if record.result.ok:
            for knob, value in record.result.knobs.items():
                values.setdefault(knob, [])
                if value not in values[knob]:
                    values[knob].append(value)
    recommended = None
    if results.baseline is not None and results.baseline.result.ok:
        recommended = {name: after for name, (_, after) in summarise(results).changed_knobs().items()}
    return Tried(results.study_name, values, recommended, twins([r for r in results.records if r.result.ok]))


def twins(measured: list[TrialRecord]) -> dict[str, list[float]]:
    """Per ``KNOB=VALUE``, the throughput of each record with that value over that of each record alike but for
    that knob."""
    found: dict[str, list[float]] = {}
    for one, other in itertools.permutations(measured, 2):
        knobs, others = one.result.knobs, other.result.knobs
        different = [name for name in knobs if knobs[name] != others.get(name)]
        if len(different) == 1:
            found.setdefault(twin_key(different[0], knobs[different[0]]), []).append(one.throughput / other.throughput)
    return found
