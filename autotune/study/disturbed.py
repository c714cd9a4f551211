"""Runs that other processes disturbed, measured once more where a single run decides.

The baseline's run is the reference of every speedup, and a race compares one run of each entrant a round: a run
that other processes slowed (``SystemReport.disturbed``: they took cores the run needed, or shared its GPU) would
decide them by the disturbance. Such a run is measured once more and the second stands, disturbed or not: a load
that lasts then weighs on every run alike, and each says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autotune.study.tuner import RunFn
from autotune.trial.result import TrialResult

# Told of each run: its name and result.
OnRunFn = Callable[[str, TrialResult], None]


def again_if_disturbed(run: RunFn, on_run: OnRunFn) -> RunFn:
    """``run``, each run told to ``on_run``; a run that other processes disturbed is measured once more, as
    ``NAME-again``, and that second run is the result."""

    def measured(knobs: dict[str, Any], name: str, on_progress=None) -> TrialResult:
        result = run(knobs, name, on_progress)
        on_run(name, result)
        if result.ok and result.measurement.system.disturbed:
            name = f"{name}-again"
            result = run(knobs, name, on_progress)
            on_run(name, result)
        return result

    return measured
