"""What a stored tuning study tried, for the advice of a profiled configuration (``Tried``)."""

from __future__ import annotations

from autotune.results.model import StudyResults
from autotune.results.remedies import Tried
from autotune.results.summary import summarise


def tries_of(results: StudyResults) -> Tried:
    """What study ``results`` measured, per knob, and the changes its recommendation makes (None without a
    measured baseline, which a recommendation needs)."""
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
    return Tried(results.study_name, values, recommended)
