"""Runs that something beside them disturbed, measured once more where a single run decides.

The baseline's run is the reference of every speedup, and a race (as the rounds of mode=benchmark and mode=check)
compares one run of each entrant a round: a run that something beside it slowed (``TrialResult.disturbed``: other
processes took cores the run needed or shared its GPU, or the cores ran slow around it) would let a passing load
decide them. Such a run is measured once more and the second stands (the first where the second failed). Once a
second run is disturbed too, the load is taken to last and no run is measured again until one runs undisturbed:
doubling every run would not end it. The runs counted disturbed are named in the reports (a race's:
``Confirmation.disturbed``), since a load slows configurations unalike (one of two threads loses more to a busy core
than one of one).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.study.tuner import RunFn
from autotune.trial.result import TrialResult

# Told of a disturbed run, its name and result, before it is measured again as NAME-again.
OnDisturbedFn = Callable[[str, TrialResult], None]


def again_if_disturbed(run: RunFn, on_disturbed: OnDisturbedFn) -> RunFn:
    """``run``, measuring a run that other processes disturbed once more, as ``NAME-again`` (the module's rule)."""
    lasting = False

    def measured(knobs: dict[str, Any], name: str, on_progress=None) -> TrialResult:
        nonlocal lasting
        first = run(knobs, name, on_progress)
        if not first.disturbed:
            lasting = lasting and not first.ok
            return first
        if lasting:
            return first
        on_disturbed(name, first)
        second = run(knobs, f"{name}-again", on_progress)
        lasting = second.disturbed
        return second if second.ok else first

    return measured
