"""Times one tuning run as it goes, stage by stage and trial process by trial process, and stores what it measured
in the study (``RunTime``, ``autotune/results/tuner_time.py``) at the end of every stage and of the run, so that a
run stopped midway still says where its time went up to its last stage."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import optuna

from autotune.results.tuner_time import TUNER, RunTime, process_phases, run_attr
from autotune.trial.result import TrialResult


class RunClock:
    """The clock of one run, started when it is made. ``stage`` times a stage; ``count`` adds a trial process's
    phases to the stage running it; once ``attach``ed to the study, every stage's end stores the record."""

    def __init__(self) -> None:
        self.started_at, self._start = time.time(), time.monotonic()
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

    def record(self, finished: bool = False) -> RunTime:
        """What was measured so far; ``finished``: the run reached its end."""
        with self._lock:
            stages = dict(self._stages)
            processes = {stage: dict(parts) for stage, parts in self._processes.items()}
        return RunTime(self.started_at, time.monotonic() - self._start, stages, processes, finished)

    def save(self, finished: bool = False) -> None:
        """Store the record in the attached study (nothing before ``attach``)."""
        if self._study is not None:
            self._study.set_user_attr(run_attr(self._machine, self.run), self.record(finished).to_dict())
