"""Run the finalists' race: rounds of processes of their own, the baseline and the finalists still racing, stored
in the study. Its rules (who races, who leaves, when it ends) are in ``autotune/results/race_rules.py``, its verdict
(who is proven, who wins) in ``autotune/results/race.py``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import optuna

from autotune.records import CONFIRMATION_ATTR, on_machine
from autotune.results.finalist import Finalist, Left, run_name
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.race_rules import (
    RACE_MARGIN,
    TIE_TOLERANCE,
    beaten_for_good,
    count_changes,
    decided,
    lagging,
    left_to_trims,
    losses_allowed,
    paired_ratio,
    rounds_lost,
    select_finalists,
    unprovable,
)
from autotune.results.trim_rules import TRIM_MARGIN
from autotune.study.clock import ended_by_budget, span
from autotune.study.trial_outcome import RunFn
from autotune.trial.result import Disturbance, TrialResult
from autotune.words import counted, listed

# The runs of a race run anew (``_parked_in_vain``) are named apart from the first race's, whose runs and files they
# would otherwise take for their own.
RACED_ANEW = "confirm-anew"
# Whether a round of these configurations (their knobs, and the step in words) fits in study.budget_s
# (``RunClock.affords_round``).
AffordsRoundFn = Callable[[list[dict[str, Any]], str], bool]
# Called before each round: the runs from there on draw a process layout of their own (``TrialRunner.new_draw``).
NewDrawFn = Callable[[], None]
# The seconds a round of these configurations is expected to take (``RunClock.round_s``).
RoundSecondsFn = Callable[[list[dict[str, Any]]], float]
# The baseline's runs of a race so far, one a round: their throughputs and their peak memories
# (``Confirmation.baseline_throughputs``, ``Confirmation.baseline_peak_memories``).
BaselineRuns = tuple[list[float], list[float | None]]


def run_race(
    study: optuna.Study,
    results: StudyResults,
    rounds: int,
    run: RunFn,
    on_run: Callable[[str, TrialResult], None],
    affords: AffordsRoundFn | None = None,
    new_draw: NewDrawFn | None = None,
    on_note: Callable[[str], None] | None = None,
    trim_ahead: Callable[[Finalist], dict[str, Finalist]] | None = None,
    round_s: RoundSecondsFn | None = None,
    park: bool = False,
) -> Confirmation | None:
    """Measure the baseline and the finalists again in processes of their own, up to ``rounds`` rounds (their order,
    the baseline's place included, rotating each round), dropping finalists and ending early by the race's rules, and
    store the outcome in the study, and each round as it ends (as a race ``cut`` short, until the last). A verdict's
    winner runs the rounds left with the baseline unless ``trim_ahead`` says the trim will race it
    (``autotune/study/trim.py``: its first race runs them). With ``park``, a finalist the trim of another would race
    as its variant does not race (``left_to_trims``); where the race's winner is not that other, or its trim will
    not race it after all, the race runs anew, every finalist in it (the rounds run are given up: rare, and a
    finalist never measured must not be passed over). A stored race
    still current (``Confirmation.is_current``) of the same planned rounds is reused; one study.budget_s or a stopped
    run cut short goes on from its rounds; one a baseline run failed, or planned for other rounds, is raced anew
    (``on_note`` is told why). A round starts only where ``affords`` it: a race left without one has no winner, so
    nothing unproven is recommended; each starts with ``new_draw``. ``on_note`` is told what the race runs, with
    what a round is expected to take where ``round_s`` says (``announce``), and its verdict (``describe``). None
    without finalists or rounds to race."""
    picks = select_finalists(results.baseline, results.trials)
    if not picks or rounds == 0:
        return None
    stored = results.confirmation
    current = stored and stored.is_current(results.baseline, results.trials)
    resumable = current and not stored.failure and stored.planned_rounds == rounds
    if resumable and not stored.cut:
        if on_note is not None:
            on_note(f"[race, stored] {stored.describe()}")
        return stored
    if current and not resumable and on_note is not None:
        on_note(f"[race] the stored race is run anew: {_why_anew(stored, rounds)}")
    base = results.baseline.result

    def entrants() -> list[Finalist]:
        return [
            Finalist(p.label, p.result.knobs, count_changes(p.result.knobs, base.knobs), p.result.peak_memory_mb)
            for p in picks
        ]

    finalists = entrants()
    ahead = trim_ahead or (lambda winner: {})
    if park and not resumable:
        _leave_to_trims(finalists, ahead, on_note)
    before_race = {p.label: p.throughput for p in picks} | {"baseline": results.baseline.throughput}
    trials = [record.label for record in results.trials if record.result.ok]

    def store(confirmation: Confirmation) -> None:
        confirmation = replace(confirmation, trials=trials)
        study.set_user_attr(on_machine(CONFIRMATION_ATTR, results.machine_id), confirmation.to_dict())

    def on_start(racing: list[Finalist], first: int) -> None:
        named = f"{'trials' if len(racing) > 1 else 'trial'} {listed([f.label for f in racing])} against the baseline"
        announce(on_note, "[race]", named, [base.knobs, *(f.knobs for f in racing)], rounds, first, round_s)

    def raced(racing: list[Finalist], start: Confirmation | None, name: str) -> Confirmation:
        return race(
            racing, base.knobs, before_race, rounds, name, run, on_run, affords=affords, new_draw=new_draw,
            start=start, on_round=store, runs_out=lambda winner: not ahead(winner), on_start=on_start,
        )  # fmt: skip

    start = stored if resumable else None
    anew = start is not None and park and _raced_anew(start, ahead)
    confirmation = raced(finalists, start, RACED_ANEW if anew else "confirm")
    if unraced := _parked_in_vain(confirmation, ahead):
        if on_note is not None:
            on_note(f"[race] {_no_trim_races(confirmation, unraced)}: the race runs anew, every finalist in it")
        # Stored before its first round: a run stopped in it goes on with it, not with the race it replaces.
        fresh = entrants()
        store(Confirmation([], fresh, None, rounds, True, baseline_peak_memories=[]))
        confirmation = raced(fresh, None, RACED_ANEW)
    store(confirmation)
    if on_note is not None:
        on_note(f"[race] {confirmation.describe()}")
    return replace(confirmation, trials=trials)


def _parked_in_vain(
    confirmation: Confirmation, trim_ahead: Callable[[Finalist], dict[str, Finalist]]
) -> list[Finalist]:
    """The finalists that left ``confirmation`` before it started for a trim that will not race them
    (``left_to_trims``): the race's winner is not the finalist whose trim was to race them (it failed, lost, or
    could not be proven), or its trim will not race them after all."""
    if confirmation.cut or confirmation.failure:  # nothing decided: a later run goes on, or the baseline is kept
        return []
    winner = confirmation.winner
    raced = [variant.knobs for variant in trim_ahead(winner).values()] if winner is not None else []
    parked = [f for f in confirmation.finalists if f.left is Left.TRIMMED]
    return [f for f in parked if f.knobs not in raced]


def _raced_anew(stored: Confirmation, trim_ahead: Callable[[Finalist], dict[str, Finalist]]) -> bool:
    """Whether ``stored``, a race cut short, is a race run anew (``_parked_in_vain``): it parks none of the finalists
    another's trim would race."""
    parked = any(f.left is Left.TRIMMED for f in stored.finalists)
    return not parked and bool(left_to_trims(stored.finalists, trim_ahead))


def _no_trim_races(confirmation: Confirmation, unraced: list[Finalist]) -> str:
    """Why no trim will race the finalists ``unraced`` that left ``confirmation`` for one, in words."""
    named = f"{'trials' if len(unraced) > 1 else 'trial'} {listed([f.label for f in unraced])}"
    winner = confirmation.winner
    why = f"trial {winner.label} won the race" if winner is not None else "no finalist won the race"
    return f"no trim will race {named} ({why})"


def _leave_to_trims(
    finalists: list[Finalist],
    trim_ahead: Callable[[Finalist], dict[str, Finalist]],
    on_note: Callable[[str], None] | None,
) -> None:
    """The finalists another's trim will race as its variants leave the race before it starts (``left_to_trims``);
    ``on_note`` is told of each."""
    left = left_to_trims(finalists, trim_ahead)
    for finalist in finalists:
        if finalist.label in left:
            by, knob = left[finalist.label]
            finalist.leave(
                Left.TRIMMED,
                f"trial {by.label}'s trim races it, as trial {by.label} without {knob}, against trial {by.label} and "
                "the baseline every round",
            )
            if on_note is not None:
                on_note(f"[race] trial {finalist.label} does not race: {finalist.dropped}")


def announce(
    on_note: Callable[[str], None] | None,
    tag: str,
    entrants: str,
    configurations: list[dict[str, Any]],
    rounds: int,
    first: int,
    round_s: RoundSecondsFn | None,
) -> None:
    """Tell ``on_note``, after ``tag``, what a race is about to run from its round ``first`` of ``rounds``:
    ``entrants`` in words, ``configurations`` in turn each round, and where ``round_s`` knows it, what a round is
    expected to take: a race can last minutes, and its runs' lines alone do not say how many follow."""
    if on_note is None:
        return
    more = f" more after round {first - 1}" if first > 1 else ""
    expected_s = round_s(configurations) if round_s is not None else 0.0
    pace = f" (about {expected_s:.0f} s a round)" if expected_s > 0 else ""  # 0: nothing timed to tell by
    left = counted(rounds - first + 1, "round")
    on_note(f"{tag} {entrants}: the {len(configurations)} in turn for up to {left}{more}{pace}")


def _why_anew(stored: Confirmation, rounds: int) -> str:
    """Why a stored race still current is not reused for a race of ``rounds`` rounds."""
    if stored.failure:
        return f"a baseline run failed in it ({stored.failure})"
    if stored.planned_rounds is None:
        return "it was stored by an earlier autotune, which did not record the rounds it planned"
    return f"it was planned for {stored.planned_rounds} rounds, study.confirm_rounds={rounds} now"


def race(
    finalists: list[Finalist],
    baseline: dict[str, Any],
    before_race: dict[str, float],
    rounds: int,
    name: str,
    run: RunFn,
    on_run: Callable[[str, TrialResult], None],
    ends: Callable[[list[Finalist], list[float], dict[str, float]], bool] = decided,
    reference: Finalist | None = None,
    affords: AffordsRoundFn | None = None,
    new_draw: NewDrawFn | None = None,
    start: Confirmation | None = None,
    on_round: Callable[[Confirmation], None] | None = None,
    runs_out: Callable[[Finalist], bool] = lambda winner: True,
    on_start: Callable[[list[Finalist], int], None] | None = None,
) -> Confirmation:
    """Up to ``rounds`` rounds of ``finalists`` and the ``baseline`` knobs, by the race's rules; each run is named
    ``name``-ROUND-…. The verdict is in when ``ends(running finalists, baseline runs, before_race)``, by default
    ``decided``, but not on a round with a disturbed run (``TrialResult.disturbed``: its figures are the ones to
    doubt: the next round without one decides); the race then ends, or where ``runs_out(its winner so far)`` the
    winner and the baseline run the rounds left, the other finalists leaving (``_leave_to``), for the interval of
    the gain it states (``Confirmation.decided_after``); a finalist left alone that ``runs_out`` and is not proven
    yet races on, for a later round may prove it. ``before_race`` holds throughputs measured before the race. A
    finalist lagging the leader by RACE_MARGIN leaves; with a ``reference``, one lagging it by TRIM_MARGIN or beaten
    by it for good (``beaten_for_good``). A round starts only where ``affords`` it (study.budget_s), and with
    ``new_draw``: the rounds are independent draws of the process layout, which decides how fast some pipelines run
    (``Launcher.new_draw``). A round in which study.budget_s ran out, a run ended by what it had left
    (``clock.ended_by_budget``), is not counted: the race is cut before it, as where ``affords`` has no time for it
    (and says so), not ended by a failed run, so that a later run goes on from the rounds before. The race goes on
    from the rounds of ``start`` (a race of these finalists cut short: each round stands on its own pairs of runs);
    ``on_round`` is given the race after each round that is not its last, as a race cut short there; ``on_start`` is
    told the finalists racing and the round's number before the first round it runs."""
    baseline_runs: list[float] = list(start.baseline_throughputs) if start else []
    baseline_memories: list[float | None] = list(start.baseline_peak_memories) if start else []
    failure, cut, disturbed = None, False, dict(start.disturbed) if start else {}
    decided_after = start.decided_after if start else None
    if start:
        finalists = [
            replace(f, throughputs=list(f.throughputs), peak_memories=list(f.peak_memories)) for f in start.finalists
        ]
        if reference is not None:
            reference = next(f for f in finalists if f.label == reference.label)

    def counted(name: str, result: TrialResult) -> None:
        if result.disturbed:
            disturbed[name] = result.disturbance
        on_run(name, result)

    first = len(baseline_runs) + 1
    for index in range(first, rounds + 1):
        racing = [f for f in finalists if f.dropped is None]
        if not racing:
            break
        entrants = [baseline, *(finalist.knobs for finalist in racing)]
        if affords is not None and not affords(entrants, span(f"{name} round", index, rounds)):
            cut = True
            break
        if on_start is not None and index == first:
            on_start(racing, index)
        if new_draw is not None:
            new_draw()
        try:
            failure = _run_round(f"{name}-{index}", baseline, racing, (baseline_runs, baseline_memories), run, counted)
        except _BudgetEnded:
            _discard_round(f"{name}-{index}-", index, racing, (baseline_runs, baseline_memories), disturbed)
            if affords is not None:  # said left out: nothing is left for the round now
                affords(entrants, span(f"{name} round", index, rounds))
            cut = True
            break
        if failure:
            break
        if decided_after is None:
            _drop(racing, baseline_runs, rounds, index, reference, lambda f: _quiet(f, name, disturbed))
            round_slowed = any(run.startswith(f"{name}-{index}-") for run in disturbed)
            running = [f for f in finalists if f.dropped is None]
            if ends(running, baseline_runs, before_race) and not (round_slowed and ends is decided):
                verdict, lone = Confirmation(baseline_runs, finalists), running[0] if len(running) == 1 else None
                if verdict.winner is not None and index < rounds and runs_out(verdict.winner):
                    _leave_to(verdict, index)
                    decided_after = index
                elif verdict.winner is not None or lone is None or not runs_out(lone):
                    break
                # else the one left, to run the rounds out, is not proven yet: a later round may prove it
        if on_round is not None and index < rounds:
            on_round(
                Confirmation(
                    baseline_runs, finalists, None, rounds, True, disturbed,
                    decided_after=decided_after, baseline_peak_memories=baseline_memories,
                )
            )  # fmt: skip
    return Confirmation(
        baseline_runs, finalists, failure, rounds, cut, disturbed,
        decided_after=decided_after, baseline_peak_memories=baseline_memories,
    )  # fmt: skip


class _BudgetEnded(Exception):
    """Raised by a run of a round that what study.budget_s had left ended (``clock.ended_by_budget``)."""


def _discard_round(
    prefix: str, index: int, racing: list[Finalist], baseline_runs: BaselineRuns, disturbed: dict[str, Disturbance]
) -> None:
    """Take back what round ``index`` (its runs named ``prefix``…) added before study.budget_s ended it: its runs,
    the drops of runs that failed in it, and the runs of it counted disturbed. Every finalist still racing ran each
    round before."""
    for kept in (*baseline_runs, *(f.throughputs for f in racing), *(f.peak_memories for f in racing)):
        del kept[index - 1 :]
    for finalist in racing:
        if finalist.failed_round == index:
            finalist.dropped = finalist.failed_round = finalist.left = None
    for name in [name for name in disturbed if name.startswith(prefix)]:
        del disturbed[name]


def _run_round(
    prefix: str,
    baseline: dict[str, Any],
    racing: list[Finalist],
    baseline_runs: BaselineRuns,
    run: RunFn,
    on_run: Callable[[str, TrialResult], None],
) -> str | None:
    """One round: the baseline and every racing finalist once, in an order rotated each round (so no one always
    runs first, right after the search or the previous round). Returns why the baseline's run failed, if it did;
    raises _BudgetEnded where what study.budget_s had left ended a run."""
    throughputs, peak_memories = baseline_runs
    order: list[Finalist | None] = [None, *racing]  # None: the baseline
    shift = len(throughputs) % len(order)
    for entrant in order[shift:] + order[:shift]:
        if entrant is not None:
            _run_finalist(entrant, prefix, run, on_run)
            continue
        name = run_name(prefix, None)
        result = run(baseline, name, None)
        on_run(name, result)
        if ended_by_budget(result):
            raise _BudgetEnded
        if not result.ok:
            return f"{name}: {result.failure}"
        throughputs.append(result.timing.throughput)
        peak_memories.append(result.peak_memory_mb)
    return None


def _run_finalist(finalist: Finalist, prefix: str, run: RunFn, on_run: Callable[[str, TrialResult], None]) -> None:
    name = run_name(prefix, finalist.label)
    result = run(finalist.knobs, name, None)
    on_run(name, result)
    if ended_by_budget(result):
        raise _BudgetEnded
    if not result.ok:
        finalist.fail(result.failure)
        return
    if finalist.peak_memory_mb is None:  # a variant that is no trial: its first run stands for it
        finalist.peak_memory_mb, finalist.result = result.peak_memory_mb, result
    finalist.record_run(result)


def _drop(
    racing: list[Finalist],
    baseline_runs: list[float],
    rounds: int,
    index: int,
    reference: Finalist | None,
    quiet: Callable[[Finalist], list[float]],
) -> None:
    """Drop the finalists that can no longer be proven against the baseline, then those lagging the leader (or the
    ``reference``) by their ``quiet`` runs (those not disturbed), and those the ``reference`` has
    beaten for good (``beaten_for_good``)."""
    allowed = losses_allowed(rounds)
    for finalist in racing:
        if finalist.dropped is None and unprovable(finalist, baseline_runs, rounds):
            why = f"slower than the baseline in round {len(baseline_runs)}"
            if allowed:
                lost = rounds_lost(finalist, baseline_runs)
                why += f" ({lost} rounds lost; a proof over {rounds} rounds allows {allowed})"
            finalist.leave(Left.UNPROVABLE, why)
    running = [f for f in racing if f.dropped is None]
    leader = reference if reference in running else max(running, key=lambda f: f.median, default=None)
    margin = TRIM_MARGIN if reference else RACE_MARGIN
    for finalist in running:
        if lagging(quiet(finalist), quiet(leader), leader.throughputs, margin):
            finalist.leave(Left.LAGGING, f"more than {margin:.0%} behind trial {leader.label} after round {index}")
        elif reference is not None and index < rounds and beaten_for_good(reference, finalist, rounds):
            ratio = paired_ratio(reference.throughputs, finalist.throughputs)
            why = (
                f"trial {reference.label} ran {ratio:.2f}x its speed in rounds 1-{index}, each by more than "
                f"{TIE_TOLERANCE:.0%}: only the {counted(rounds - index, 'round')} left reading this one faster could "
                "change that"
            )
            finalist.leave(Left.BEATEN, why)


def _leave_to(verdict: Confirmation, index: int) -> None:
    """Every finalist still racing but ``verdict``'s winner (the race's after round ``index``) leaves, saying why."""
    chosen, why = verdict.winner, verdict.why_won()
    reason = f"the race was decided for trial {chosen.label} after round {index}" + (f" ({why})" if why else "")
    for finalist in verdict.finalists:
        if finalist.dropped is None and finalist is not chosen:
            finalist.leave(Left.DECIDED, reason)


def _quiet(finalist: Finalist, name: str, disturbed: dict[str, str]) -> list[float]:
    """``finalist``'s runs in race ``name`` that were not disturbed (``disturbed``: the slowed runs' names;
    each finalist's runs are its rounds', from round 1)."""
    return [
        throughput
        for round_index, throughput in enumerate(finalist.throughputs, 1)
        if run_name(f"{name}-{round_index}", finalist.label) not in disturbed
    ]
