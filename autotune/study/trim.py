"""Only the changes that matter: the race's winner, raced against itself with each of its changes undone in turn.
The rules are the trim's (``autotune/results/trim_rules.py``); this module builds the variants and runs the races."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from functools import partial
from typing import Any

import optuna

from autotune.knobs import KNOBS, accumulated_to, conflict, device_kind, undo
from autotune.records import TRIM_ATTR, on_machine
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import count_changes
from autotune.results.summary import race_name
from autotune.results.trim_rules import (
    alone,
    is_trim_of,
    settled,
    trim_path,
    trim_rounds,
    trim_started_from,
    undone_again,
    unsettled,
)
from autotune.study.run_race import AffordsRoundFn, NewDrawFn, RoundSecondsFn, announce, race
from autotune.study.trial_outcome import RunFn
from autotune.trial.result import TrialResult
from autotune.words import counted


def run_trim(
    study: optuna.Study,
    results: StudyResults,
    confirmation: Confirmation | None,
    run: RunFn,
    on_run: Callable[[str, TrialResult], None],
    affords: AffordsRoundFn | None = None,
    new_draw: NewDrawFn | None = None,
    on_note: Callable[[str], None] | None = None,
    round_s: RoundSecondsFn | None = None,
) -> list[Confirmation]:
    """Race the race's winner against its variants (``undo``), the baseline racing too; then the new winner against
    its variants undoing the changes whose undoing also tied (``undo_next``), each alone and all at once
    (``all_undone``), until a race's winner is the configuration it started from; store the races in the study as they
    run.
    The races of a stored trim of the same winner and rounds (``is_trim_of``, as the summary's) are reused up to the
    first that is not ``settled``: a race that study.budget_s or a stopped run cut short goes on from its rounds
    (each race is stored before it runs, as one not run yet, and after each round); one that a failed run ended, or
    that the configuration it started from left (its run failed, or it lost a round to the baseline), is raced
    again. Nothing to do without a winner changing two knobs or more.
    Every variant gone (``alone``), a race ends, or, where the configuration it started from ran fewer rounds before
    (the finalists' race ended at its verdict: ``trim_ahead``), that configuration and the baseline run the rounds
    left, for the gain's interval (a trim race whose variant won ran them all).
    A round starts only where ``affords`` it. Each round starts with ``new_draw``, as the race's do. ``on_note`` is
    told of each stored race raced again, and why, what each race runs (``announce``, with ``round_s``), and each
    race's verdict (``describe``)."""
    winner = confirmation.winner if confirmation else None
    baseline = results.baseline.result.knobs
    device = device_kind(results.device)
    if winner is None or not _undoable(winner, baseline, results.batch_policy, device):
        return []
    rounds = trim_rounds(confirmation)
    effective = accumulated_to(results.batch_policy, baseline)
    stored = results.trim if is_trim_of(results.trim, confirmation) else []
    done = list(itertools.takewhile(settled, stored))  # the first not settled goes on or is raced again
    races: list[Confirmation] = []
    before_race = {winner.label: winner.median, "baseline": confirmation.baseline_median}
    current, pending = winner, list(KNOBS)
    while current.changes >= 2:
        leader = Finalist(current.label, current.knobs, current.changes, current.peak_memory_mb, result=current.result)
        undone = variants(current, baseline, pending, effective, device)
        if not undone:
            break
        name = f"trim-{len(races) + 1}"
        entrants = [
            leader,
            *undone.values(),
            *all_undone(current, baseline, undone if races else {}, effective, device),
        ]
        ran = stored[len(races)] if len(races) < len(stored) else None
        same = ran is not None and [f.label for f in ran.finalists] == [f.label for f in entrants]
        reused = same and len(races) < len(done)
        if not reused:
            start = ran if same and len(races) == len(done) and _goes_on(ran) else None
            if same and start is None and len(races) == len(done) and on_note is not None:
                on_note(f"[trim] the stored {race_name(len(races) + 1)} is raced again: {unsettled(ran)}")
            # Stored first as a race not run yet (as study.budget_s leaves one), then as each round ends: a run
            # stopped in it keeps the races and rounds before, and the trim stays unsettled.
            _store(study, results, [*races, start or Confirmation([], entrants, planned_rounds=rounds, cut=True)])
            singles = {variant.label for variant in undone.values()}
            announced = partial(_announce, on_note, singles, baseline, rounds, round_s, len(races))
            ran = race(
                entrants, baseline, before_race, rounds, name, run, on_run, alone, leader, affords, new_draw, start,
                lambda so_far: _store(study, results, [*races, so_far]), _runs_out(current, rounds), announced,
            )  # fmt: skip
        races.append(ran)
        if on_note is not None:
            on_note(f"[trim{', stored' if reused else ''}] {race_name(len(races)).capitalize()}: {ran.describe(True)}")
        new = trim_path(races)[-1].left
        if new is None or new.label == current.label:
            break
        raced = dict(zip(undone, races[-1].finalists[1 : len(undone) + 1], strict=True))  # the race's own
        pending = undo_next(races[-1].finalists[0], raced, new)
        current, before_race = new, {new.label: new.median, "baseline": races[-1].baseline_median}
    _store(study, results, races)
    return races


def _announce(
    on_note: Callable[[str], None] | None,
    singles: set[str],
    baseline: dict[str, Any],
    rounds: int,
    round_s: RoundSecondsFn | None,
    before: int,
    racing: list[Finalist],
    first: int,
) -> None:
    """``announce`` for the trim's race after ``before`` others, racing ``racing``: the configuration it started from
    against its variants, those undoing one change (labelled in ``singles``) and the one undoing them all at once;
    each race named as the reports name it (``race_name``)."""
    leader, variants = racing[0], racing[1:]
    one_each = sum(1 for variant in variants if variant.label in singles)
    together = len(variants) > one_each  # the variant undoing them all at once races too
    ways = ["each alone"] if one_each > 1 else ["one alone"] if one_each else []
    ways += ["all at once"] if together else []
    if not before:
        changes = "each change undone"
    elif one_each == 1 and not together:
        changes = f"the change that tied in {race_name(before)} undone"
    else:
        changes = f"the changes that tied in {race_name(before)} undone, {' and '.join(ways)}"
    racers = counted(len(variants), "variant")
    entrants = f"{race_name(before + 1)}: trial {leader.label} against itself with {changes} ({racers})"
    configurations = [baseline, *(finalist.knobs for finalist in racing)]
    announce(on_note, "[trim]", f"{entrants}, the baseline too", configurations, rounds, first, round_s)


def trim_ahead(
    results: StudyResults,
    winner: Finalist,
    rounds: int,
    fits: Callable[[list[dict[str, Any]]], bool] | None = None,
) -> dict[str, Finalist]:
    """The variants the trim's first race will race ``winner``, the finalists' race's, against anew over ``rounds``
    rounds, by the knob each undoes; none where it will not: where ``winner`` changes fewer than two knobs or none
    can be undone (``variants``), a stored first race of it stands (``run_trim`` reuses one that ran to its end as it
    ran), or ``fits``, where given (study.budget_s), says that race does not fit, told the configurations of one of
    its rounds (``first_race``). Where the trim will race it, the finalists' race ends at its verdict (``run_race``):
    that trim race re-measures the winner against the baseline over the rounds planned, and a race that ran them out
    too would measure it twice; and a finalist that is one of those variants does not race (``left_to_trims``)."""
    stored = results.trim
    if trim_started_from(stored, winner.label, rounds) and settled(stored[0]):
        return {}
    baseline = results.baseline.result.knobs
    undone = _undoable(winner, baseline, results.batch_policy, device_kind(results.device))
    entrants = _round_of(winner, baseline, undone)
    return undone if entrants and (fits is None or fits(entrants)) else {}


def first_race(winner: Finalist, baseline: dict[str, Any], batch_policy: str, device: str) -> list[dict[str, Any]]:
    """The configurations of a round of the trim's first race of ``winner`` (``baseline``'s, under search.batch_policy
    ``batch_policy``, on a ``device`` of that kind): the baseline, ``winner`` and its variants (``_undoable``); none
    where it has none."""
    return _round_of(winner, baseline, _undoable(winner, baseline, batch_policy, device))


def _round_of(winner: Finalist, baseline: dict[str, Any], undone: dict[str, Finalist]) -> list[dict[str, Any]]:
    """The configurations of a round of a trim race of ``winner`` against its variants ``undone``: the baseline,
    ``winner`` and those; none without variants."""
    return [baseline, winner.knobs, *(variant.knobs for variant in undone.values())] if undone else []


def _undoable(winner: Finalist, baseline: dict[str, Any], batch_policy: str, device: str) -> dict[str, Finalist]:
    """``winner``'s variants (``variants``) where it changes two knobs or more: what the trim's first race races."""
    if count_changes(winner.knobs, baseline) < 2:
        return {}
    return variants(winner, baseline, list(KNOBS), accumulated_to(batch_policy, baseline), device)


def _runs_out(reference: Finalist, rounds: int) -> Callable[[Finalist], bool]:
    """A trim race's ``runs_out`` (``run_race.race``): once every variant has left, ``reference``, the configuration it
    started from, runs the rounds left with the baseline where it ran fewer than ``rounds`` before; no variant does."""
    short = len(reference.throughputs) < rounds
    return lambda winner: short and winner.label == reference.label


def _goes_on(race: Confirmation) -> bool:
    """Whether a later run goes on from the rounds of ``race``, a trim race not settled: it was cut short (by
    study.budget_s or a stopped run), not ended by a failed run or by the configuration it started from leaving."""
    return race.cut and race.failure is None and race.finalists[0].dropped is None


def _store(study: optuna.Study, results: StudyResults, races: list[Confirmation]) -> None:
    study.set_user_attr(on_machine(TRIM_ATTR, results.machine_id), [trim.to_dict() for trim in races])


def undo_next(reference: Finalist, undone: dict[str, Finalist], new: Finalist) -> list[str]:
    """The changes the next race may undo on top of ``new``, the winner of a race of ``reference`` against its
    variants ``undone`` (by the knob undone): those whose undoing cost nothing beyond noise against ``reference``,
    the configuration they were made from, as ``new``'s did (``undone_again``)."""
    return [knob for knob, variant in undone.items() if undone_again(reference, variant, new)]


def all_undone(
    finalist: Finalist,
    baseline: dict[str, Any],
    undone: dict[str, Finalist],
    effective_batch_size: int | None,
    device: str,
) -> list[Finalist]:
    """``finalist`` with all the changes of its variants ``undone`` (by the knob undone) undone at once, where there
    are two or more: the changes whose undoing each cost nothing in the race before. Where it ties with
    ``finalist`` it wins the race by fewest changes, and one race undoes them all instead of one race each; where
    they matter together (either of two redundant changes gives the gain) it loses, and they go one at a time."""
    if len(undone) < 2:
        return []
    knobs = finalist.knobs
    for name in undone:
        knobs = undo(knobs, baseline, name)
    changes = count_changes(knobs, baseline)
    if changes == 0 or conflict(knobs, effective_batch_size, device) or any(knobs == o.knobs for o in undone.values()):
        return []
    return [Finalist(" without ".join([finalist.label, *undone]), knobs, changes, None)]


def variants(
    finalist: Finalist, baseline: dict[str, Any], names: list[str], effective_batch_size: int | None, device: str
) -> dict[str, Finalist]:
    """``finalist`` with each change from ``baseline`` among ``names`` undone in turn, by the knob undone (the same
    configuration once; none whose values cannot run together at ``effective_batch_size`` on a ``device`` of that
    kind, ``conflict``; not the
    baseline's own, which races in every round as the baseline)."""
    found: dict[str, Finalist] = {}
    for name in names:
        if finalist.knobs[name] == baseline[name]:
            continue
        knobs = undo(finalist.knobs, baseline, name)
        changes = count_changes(knobs, baseline)
        if (
            knobs != finalist.knobs
            and changes > 0
            and conflict(knobs, effective_batch_size, device) is None
            and all(knobs != other.knobs for other in found.values())
        ):
            found[name] = Finalist(f"{finalist.label} without {name}", knobs, changes, None)
    return found
