"""Runs that something beside them disturbed, measured once more where a single run decides.

The baseline's run is the reference of every speedup, and a race (as the rounds of mode=benchmark and mode=check)
compares one run of each entrant a round: a run that something beside it slowed (``TrialResult.disturbed``: other
processes took cores the run needed or shared its GPU, or the cores ran slow around it) would let a passing load
decide them. Such a run is measured once more and the second stands (the first where the second failed, or was
slowed too and read slower: a load only slows a run), where
study.budget_s has time for it and, in a round under way, for the rest of the round after it
(``RunClock.affords_again``; else the first is counted, though disturbed). Once a second run is disturbed too, the
load is taken to last and no run is measured again until one runs undisturbed: doubling every run would not end it.
The runs counted disturbed are named in the reports (a race's: ``Confirmation.disturbed``), since a load slows
configurations unalike (one of two threads loses more to a busy core than one of one).

The cores' reading is tested as it goes: where a run was measured again for it alone and the second run, undisturbed,
read under ``NOT_SLOWED`` times the first's throughput, the reading found no slowdown that single runs' noise does
not hide (a second run it flags too may share a lasting slowdown, and tells nothing). After ``FALSE_ALARMS`` such in
a row, the cores' reading alone has no run measured again (the runs still say what it read): on a host whose cores
flip between two speeds every few seconds, faster than a run lasts, its readings at a run's edges say nothing of the
run between them, and measuring again would only lengthen the study (docs/benchmarks.md section 13).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.study.trial_outcome import RunFn
from autotune.trial.result import TrialResult

# Told of a disturbed run, its name and result, before it is measured again as NAME-again.
OnDisturbedFn = Callable[[str, TrialResult], None]
# Whether measuring a configuration (its knobs) once more fits in study.budget_s, the step named in words
# (``RunClock.affords_again``).
AffordsAgainFn = Callable[[dict[str, Any], str], bool]
# A slowdown the cores' reading flags (1.3x or more) that lasted through a run would leave the second run this many
# times faster at least; a single run's figure varies 6-20 % between processes.
NOT_SLOWED = 1.10
# Said of a second run that stands for nothing: slowed too and slower than the first (``_standing``).
FIRST_STANDS = "slowed too and slower: the first run stands"
# Said of a second run that failed: the first, slowed, stands (``_standing``).
FAILED_FIRST_STANDS = "the first run stands"
FALSE_ALARMS = 2


def again_if_disturbed(
    run: RunFn,
    on_disturbed: OnDisturbedFn,
    on_note: Callable[[str], None] | None = None,
    affords: AffordsAgainFn | None = None,
    on_first_stands: OnDisturbedFn | None = None,
) -> RunFn:
    """``run``, measuring a run that something beside it disturbed once more, as ``NAME-again`` (the module's rules),
    where ``affords`` it (study.budget_s; None: always); ``on_note`` is told once where the cores' reading alone stops
    having runs measured again; ``on_first_stands`` of a second run, ``NAME-again``, that failed, or was slowed too
    and slower than the first, which stands (``_standing``: ``first_stands_words``): else the second would be said
    nowhere, and the first not said to stand."""
    lasting = False
    false_alarms = 0

    def measured(knobs: dict[str, Any], name: str, on_progress=None) -> TrialResult:
        nonlocal lasting, false_alarms
        first = run(knobs, name, on_progress)
        if not first.disturbed:
            lasting = lasting and not first.ok
            return first
        cores_alone = first.disturbance.cores_alone
        if lasting or (cores_alone and false_alarms >= FALSE_ALARMS):
            return first
        if affords is not None and not affords(knobs, f"{name} measured again (slowed)"):
            return first
        on_disturbed(name, first)
        second = run(knobs, f"{name}-again", on_progress)
        lasting = second.disturbed
        if cores_alone and second.ok and not second.disturbed:
            false_alarms = false_alarms + 1 if second.timing.throughput < NOT_SLOWED * first.timing.throughput else 0
            if false_alarms == FALSE_ALARMS and on_note is not None:
                on_note(
                    f"[cores] the cores' readings foretold no slow run here ({FALSE_ALARMS} runs measured again for "
                    f"them in a row read under {NOT_SLOWED:g}x the first, undisturbed): runs they flag are no longer "
                    "measured again"
                )
        standing = _standing(first, second)
        if standing is first and on_first_stands is not None:
            on_first_stands(f"{name}-again", second)
        return standing

    return measured


def first_stands_words(second: TrialResult) -> str:
    """Why the first run stands, in words to follow the second run, ``second``: it failed, or read slower, slowed
    too."""
    return FIRST_STANDS if second.ok else FAILED_FIRST_STANDS


def _standing(first: TrialResult, second: TrialResult) -> TrialResult:
    """Which of a disturbed run and the run measuring it again stands: the second, but the first where the second
    failed, or where the second was disturbed too and read slower (a load only slows a run: of two slowed runs the
    faster was slowed less)."""
    if not second.ok:
        return first
    if second.disturbed and first.ok and first.timing.throughput > second.timing.throughput:
        return first
    return second
