"""Where the tuner's time went, in words and as data, from the runs' records the study stores
(``autotune/results/tuner_time.py``); nothing here measures."""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from autotune.results.tuner_time import PHASE_WORDS, STAGE_WORDS, TAKEN_OVER_STEP, TunerTime, shares
from autotune.words import percents


def tuner_time_line(split: TunerTime) -> str:
    """One line: the run's wall time, its share by phase then by stage, largest first."""
    phases = _largest(shares(split.phases()), PHASE_WORDS)
    stages = _largest(shares(split.stages()), STAGE_WORDS)
    runs = f" ({covers(split)})" if len(split.runs) > 1 else ""
    return f"where the tuner's {split.wall_s:.0f} s went{runs}: {phases}; by stage: {stages}"


def budget_lines(split: TunerTime) -> list[str]:
    """For each run held to study.budget_s, a line: the time it used, and what the budget left out of it; for each
    run another tuner took for dead, a line saying what it left to that tuner (``TAKEN_OVER_STEP``)."""
    lines = []
    for run in split.runs:
        of_run = f" (run of {_when(run.started_at)})" if len(split.runs) > 1 else ""
        if TAKEN_OVER_STEP in run.left_out:
            lines.append(f"the run{of_run} left out {TAKEN_OVER_STEP}")
        if run.budget_s is None:
            continue
        over = run.wall_s - run.budget_s
        late = f", {over:.0f} s over: a step took longer than expected" if over >= 0.5 else ""
        head = f"study.budget_s={run.budget_s:g}{of_run} ({run.wall_s:.0f} s used{late})"
        left = [step for step in run.left_out if step != TAKEN_OVER_STEP]
        lines.append(f"{head} left out: {'; '.join(left)}" if left else f"{head}: nothing left out")
    return lines


def forecast_lines(split: TunerTime) -> list[str]:
    """For each run that foretold its rest (``RunTime.foretold``), a line: what it foretold, and what the rest took;
    one whose record ends before its end (stopped, or still going) says so."""
    lines = []
    for run in split.runs:
        if run.foretold is None:
            continue
        of_run = f" (run of {_when(run.started_at)})" if len(split.runs) > 1 else ""
        took_s = run.wall_s - run.foretold.at_s
        head = f"foretold {run.foretold.at_s:.0f} s in{of_run}: up to about {run.foretold.rest_s:.0f} s more"
        if not run.finished:
            lines.append(f"{head}; its record ends {took_s:.0f} s later, before the run's end")
        elif run.foretold.rest_s > 0:
            lines.append(f"{head}; the rest took {took_s:.0f} s ({took_s / run.foretold.rest_s:.2f}x the forecast)")
    return lines


def _largest(share: dict[str, float], words: dict[str, str]) -> str:
    """The shares that come to a whole percent or more of the whole (``percents``), largest first: the console's one
    line leaves out the rest (the reports list every one)."""
    whole = percents(share)
    shown = sorted((name for name in share if whole[name] >= 1), key=lambda name: -share[name])
    return ", ".join(f"{words.get(name, name)} {whole[name]} %" for name in shown)


def covers(split: TunerTime) -> str:
    """Which runs of the study the figures cover: each one's start, wall time, and whether it reached its end."""
    runs = "; ".join(
        f"{_when(run.started_at)}, {run.wall_s:.0f} s{'' if run.finished else ', stopped before its end'}"
        for run in split.runs
    )
    return f"{len(split.runs)} run{'s' if len(split.runs) > 1 else ''}: {runs}"


def _when(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def tuner_time_data(split: TunerTime) -> dict[str, Any]:
    """report.json's ``tuner_time``: seconds by phase, by stage and by both, summing to ``wall_s``, and the runs they
    cover."""
    return {
        "wall_s": split.wall_s,
        "phases_s": split.phases(),
        "stages_s": split.stages(),
        "by_stage_s": split.by_stage(),
        "runs": [
            {
                "started_at": _when(run.started_at),
                "wall_s": run.wall_s,
                "finished": run.finished,
                "budget_s": run.budget_s,
                "left_out": run.left_out,
                "foretold": asdict(run.foretold) if run.foretold else None,
            }
            for run in split.runs
        ],
    }
