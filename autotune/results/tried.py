"""What a stored tuning study tried, for the advice of a profiled configuration (``Tried``)."""

from __future__ import annotations

import itertools
from typing import Any

from autotune.knobs import changed
from autotune.records import TrialRecord
from autotune.results.model import StudyResults
from autotune.results.race_rules import beats
from autotune.results.remedy_model import Tried, loader_key, twin_key, value_key
from autotune.results.summary import Summary, summarise


def tries_of(results: StudyResults) -> Tried:
    """What study ``results`` measured, per knob, the changes its recommendation makes (None without a measured
    baseline, which a recommendation needs) and the values it keeps, its configurations measured alike but for one
    knob (``twins``), the changes its races left out (the trim's, and the finalists' race's: ``raced_out``), the
    DataLoader alone as its probe read it (``loaders``), the values its races ran (``raced_values``), and each
    configuration's throughput over the baseline's, per value it ran (``against_baseline``)."""
    measured = [record for record in results.records if record.result.ok]
    # A trial measured with a loss that was not finite ran its values, as did one pruned, until it read clearly slower,
    # or stopped by the pruner after such a loss: they were tried.
    tried = [r for r in results.records if r.result.ran_values]
    recommended, left_out, kept, raced = None, {}, {}, {}
    if results.baseline is not None and results.baseline.result.ok:
        summary = summarise(results)
        recommended = {name: after for name, (_, after) in summary.changed_knobs().items()}
        left_out = {**raced_out(summary), **summary.no_difference}
        baseline = summary.baseline.result.knobs
        kept = {name: value for name, value in summary.recommended.result.knobs.items() if baseline.get(name) == value}
        raced = raced_values(results)
    return Tried(
        results.study_name,
        values_of([r.result.knobs for r in tried]),
        recommended,
        twins(measured),
        left_out,
        loaders(results),
        kept,
        raced,
        against_baseline(measured, results.baseline),
    )


def raced_values(results: StudyResults) -> dict[str, list]:
    """Per knob, the values the study's races ran (the finalists' race and its trim's, as stored: one stale, or
    stopped, still weighed what it ran): a finalist's, and the baseline's, that ran in a round the race paired
    (``Confirmation.paired``: a run of a round whose baseline run failed is weighed by no figure). A value only single
    runs measured no race weighed."""
    races = [race for race in (results.confirmation, *results.trim) if race is not None and race.rounds]
    ran = [f.knobs for race in races for f in race.finalists if race.paired(f)[0]]
    return values_of(ran + ([results.baseline.result.knobs] if races else []))


def raced_out(summary: Summary) -> dict[str, Any]:
    """The changes the finalists' race the recommendation comes from (``Summary.confirmation``) raced on its winner
    one at a time and left out: knob → value, for each finalist alike the winner but for that knob, at a value other
    than the baseline's, that did not beat it beyond noise (``beats``) in the rounds both ran (one at least: a
    finalist that lagged, or whose run failed, left early); the first such finalist of a knob where several are. The
    recommendation is that winner less the changes its trim found to make no difference: such a finalist ran every
    change the recommendation makes, and its own gained nothing."""
    race = summary.confirmation
    winner = race.winner if race is not None and not summary.is_baseline else None
    if winner is None:
        return {}
    baseline = summary.baseline.result.knobs
    found: dict[str, Any] = {}
    for finalist in race.finalists:
        change = changed(finalist.knobs, winner.knobs)
        if len(change) == 1 and finalist.throughputs and not beats(finalist, winner):
            ((knob, (_, value)),) = change.items()
            if value != baseline.get(knob):
                found.setdefault(knob, value)
    return found


def values_of(configurations: list[dict[str, Any]]) -> dict[str, list]:
    """Per knob, the values ``configurations`` (knob → value each) ran with, each once, in the order first met."""
    values: dict[str, list] = {}
    for knobs in configurations:
        for knob, value in knobs.items():
            if value not in values.setdefault(knob, []):
                values[knob].append(value)
    return values


def twins(measured: list[TrialRecord]) -> dict[str, list[float]]:
    """Per change of one knob (``twin_key``), the throughput of each record after it over that of each record before
    it, the two alike but for that knob (``changed``: the options that follow from it, such as workers' options,
    are no change of their own)."""
    found: dict[str, list[float]] = {}
    for after, before in itertools.permutations(measured, 2):
        if len(change := changed(after.result.knobs, before.result.knobs)) == 1:
            ((knob, (was, now)),) = change.items()
            found.setdefault(twin_key(knob, was, now), []).append(after.throughput / before.throughput)
    return found


def against_baseline(measured: list[TrialRecord], baseline: TrialRecord | None) -> dict[str, list[float]]:
    """Per knob at a value (``value_key``), the throughput of each of the ``measured`` records with it over the
    ``baseline``'s (the baseline's own among them, 1.0); none without a measured baseline."""
    if baseline is None or not baseline.result.ok:
        return {}
    found: dict[str, list[float]] = {}
    for record in measured:
        for knob, value in record.result.knobs.items():
            found.setdefault(value_key(knob, value), []).append(record.throughput / baseline.throughput)
    return found


def loaders(results: StudyResults) -> dict[str, float]:
    """The samples/s of the DataLoader alone, per batch size and worker count (``loader_key``), as the study's probe
    read them on this machine (none where it did not run)."""
    probe = results.probe
    if probe is None or probe.result is None:
        return {}
    timed = zip(probe.plan.loaders, probe.result.loader_throughputs, strict=True)
    return {loader_key(s["batch_size"], s["num_workers"]): rate for s, rate in timed if rate is not None}
