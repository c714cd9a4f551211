"""Times one tuning run as it goes, stage by stage and trial process by trial process, and stores what it measured
in the study (``RunTime``, ``autotune/results/tuner_time.py``) at the end of every stage and of the run, so that a
run stopped midway still says where its time went up to its last stage. It also holds the run to ``study.budget_s``
(``RunClock.affords``: the budget's one rule)."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import optuna

from autotune.results.tuner_time import TUNER, RunTime, process_phases, run_attr
from autotune.trial.result import TrialResult

SEARCH = "search"  # the stage whose trials screen (a shorter window than the baseline's and the races')


class RunClock:
    """The clock of one run, started when it is made. ``stage`` times a stage; ``count`` adds a trial process's
    phases to the stage running it; once ``attach``ed to the study, every stage's end stores the record.
    ``budget_s`` (study.budget_s; None: unbounded) bounds the run: see ``affords``; a run of a configuration is
    ``repeats`` processes (measure.repeats)."""

    def __init__(self, budget_s: float | None = None, repeats: int = 1) -> None:
        self.started_at, self._start = time.time(), time.monotonic()
        self.budget_s, self.repeats = budget_s, repeats
        self.left_out: list[str] = []  # the steps the budget left out, in words
        # The wall time of each measuring process of this run, by whether it screened (a search trial's shorter
        # window) or ran the full window (the baseline's and the races').
        self._runs: dict[bool, list[float]] = {True: [], False: []}
        self.run = f"{self.started_at:.3f}-{os.getpid()}"
        self._stages: dict[str, float] = {}
        self._processes: dict[str, dict[str, float]] = {}
        self._current, self._slots = TUNER, 1
        self._lock = threading.Lock()  # the slots of study.parallel count their trials from threads of their own
        self._study: optuna.Study | None = None
        self._machine = ""

    def attach(self, study: optuna.Study, machine: str) -> None:
        """Store the record in ``study``, of ``machine``, from now on."""
        self._study, self._machine = study, machine

    @contextmanager
    def stage(self, name: str, slots: int = 1) -> Iterator[None]:
        """Time the stage ``name``, whose trial processes run ``slots`` at a time; store the record at its end."""
        self._current, self._slots, began = name, slots, time.monotonic()
        try:
            yield
        finally:
            with self._lock:
                self._stages[name] = self._stages.get(name, 0.0) + time.monotonic() - began
                self._current, self._slots = TUNER, 1
            self.save()

    def count(self, result: TrialResult) -> None:
        """Add one trial process's phases to the running stage: with several at once, each its share of the stage's
        wall time (its seconds over the slots), so that the stage's phases still add up to its wall time."""
        with self._lock:
            parts = self._processes.setdefault(self._current, {})
            for phase, seconds in process_phases(result).items():
                parts[phase] = parts.get(phase, 0.0) + seconds / self._slots
            if result.timing is not None:
                self._runs[self._current == SEARCH].append(result.wall_s)

    def expect(self, result: TrialResult) -> None:
        """Take a stored full-window run's wall time (over its ``repeats`` processes) as what one takes: a resumed
        run reuses its stored baseline. One stored without a wall time says nothing."""
        if result.wall_s > 0:
            with self._lock:
                self._runs[False].append(result.wall_s / self.repeats)

    def run_s(self, screen: bool = False) -> float:
        """The median wall time of this run's measuring processes of one kind so far, full windows or (``screen``)
        search trials, the other kind's until one of this kind ran; 0.0 before the first: the unit in which a
        step is expected to take time."""
        with self._lock:
            runs = self._runs[screen] or self._runs[not screen]
            return statistics.median(runs) if runs else 0.0

    def affords(self, seconds: float, step: str) -> bool:
        """The budget's rule: a step starts only where the time it is expected to take, ``seconds`` (in units of
        ``run_s``), fits in what is left of ``budget_s``; one that does not is left out, and said so in the reports
        (``left_out``). Without a budget, and before the first measuring process (the baseline always runs), every
        step fits. A step that takes longer than expected ends the run past the budget by its overrun."""
        if self.budget_s is None or not self.run_s():
            return True
        left = self.budget_s - (time.monotonic() - self._start)
        if seconds <= left:
            return True
        with self._lock:
            self.left_out.append(f"{step} (~{seconds:.0f} s needed, {max(left, 0.0):.0f} s left)")
        return False

    def runs_s(self, runs: int, screens: int = 0) -> float:
        """The seconds ``runs`` full-window runs and ``screens`` search trials are expected to take, each of
        ``repeats`` processes."""
        return self.repeats * (runs * self.run_s() + screens * self.run_s(screen=True))

    def affords_runs(self, runs: int, step: str, screens: int = 0) -> bool:
        """``affords`` for a step of ``runs`` full-window runs and ``screens`` search trials (``runs_s``)."""
        return self.affords(self.runs_s(runs, screens), step)

    def record(self, finished: bool = False) -> RunTime:
        """What was measured so far; ``finished``: the run reached its end."""
        with self._lock:
            stages = dict(self._stages)
            processes = {stage: dict(parts) for stage, parts in self._processes.items()}
            left_out = list(self.left_out)
        wall_s = time.monotonic() - self._start
        return RunTime(self.started_at, wall_s, stages, processes, finished, self.budget_s, left_out)

    def save(self, finished: bool = False) -> None:
        """Store the record in the attached study (nothing before ``attach``)."""
        if self._study is not None:
            self._study.set_user_attr(run_attr(self._machine, self.run), self.record(finished).to_dict())


def span(step: str, first: int, last: int) -> str:
    """Steps ``first`` to ``last`` named for the reports' list of what was left out: "search trial 3", or "search
    trials 3 to 8"."""
    return f"{step} {first}" if first == last else f"{step}s {first} to {last}"
