"""Times one tuning run as it goes, stage by stage and trial process by trial process, and stores what it measured
in the study (``RunTime``, ``autotune/results/tuner_time.py``) at the end of every stage and of the run, so that a
run stopped midway still says where its time went up to its last stage. It also holds the run to ``study.budget_s``
(``RunClock.affords``: the budget's one rule), each step expected to take what this run measured of the
configurations it runs (``RunClock.round_s``)."""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import optuna

from autotune.measure.recorder import WindowPlan
from autotune.records import config_key
from autotune.results.tuner_time import TUNER, RunTime, process_phases, run_attr
from autotune.trial.result import TrialResult

SEARCH = "search"  # the stage whose trials screen (a shorter window than the baseline's and the races')


class RunClock:
    """The clock of one run, started when it is made. ``stage`` times a stage; ``count`` adds a trial process's
    phases to the stage running it; once ``attach``ed to the study, every stage's end stores the record.
    ``budget_s`` (study.budget_s; None: unbounded) bounds the run: see ``affords``; a run of a configuration is
    ``repeats`` processes (measure.repeats) with the full window ``plan`` (measure.plan)."""

    def __init__(self, budget_s: float | None = None, repeats: int = 1, plan: WindowPlan | None = None) -> None:
        self.started_at, self._start = time.time(), time.monotonic()
        self.budget_s, self.repeats, self._plan = budget_s, repeats, plan or WindowPlan()
        self.left_out: list[str] = []  # the steps the budget left out, in words
        # The wall time of each measuring process of this run, by whether it screened (a search trial's shorter
        # window) or ran the full window (the baseline's and the races').
        self._runs: dict[bool, list[float]] = {True: [], False: []}
        # By configuration: its full-window processes' wall times less their start-up, and its search trial.
        self._full: dict[str, list[float]] = {}
        self._screened: dict[str, TrialResult] = {}
        self._startups: list[float] = []  # every process's start-up: a fork, or a fork server's or interpreter's start
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
            if result.startup_s is not None:
                self._startups.append(result.startup_s)
            if result.timing is not None:
                screen = self._current == SEARCH
                self._runs[screen].append(result.wall_s)
                if screen:
                    self._screened[config_key(result.knobs)] = result
                else:
                    self._full.setdefault(config_key(result.knobs), []).append(result.wall_s - (result.startup_s or 0))

    def expect(self, result: TrialResult) -> None:
        """Take a stored full-window run's wall time (over its ``repeats`` processes) as what one takes: a resumed
        run reuses its stored baseline. One stored without a wall time says nothing."""
        if result.wall_s > 0:
            with self._lock:
                self._runs[False].append(result.wall_s / self.repeats)
                self._full.setdefault(config_key(result.knobs), []).append(result.wall_s / self.repeats)

    def run_s(self, screen: bool = False) -> float:
        """The median wall time of this run's measuring processes of one kind so far, full windows or (``screen``)
        search trials, the other kind's until one of this kind ran; 0.0 before the first: the unit in which a
        step is expected to take time."""
        with self._lock:
            runs = self._runs[screen] or self._runs[not screen]
            return statistics.median(runs) if runs else 0.0

    def affords(self, seconds: float, step: str) -> bool:
        """The budget's rule: a step starts only where the time it is expected to take, ``seconds`` (``round_s``,
        ``screen_s``), fits in what is left of ``budget_s``; one that does not is left out, and said so in the reports
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

    def run_of_s(self, knobs: dict) -> float:
        """What one full-window process of the configuration ``knobs`` is expected to take: its own such processes'
        median; else its search trial's, its window as long as the full window's rule (``WindowPlan``) makes it at
        that trial's step time; else ``run_s`` (a configuration not measured yet)."""
        return self._expected(config_key(knobs))

    def _expected(self, key: str) -> float:
        with self._lock:
            own, screened = self._full.get(key), self._screened.get(key)
            startup = statistics.median(self._startups) if self._startups else 0.0
        if own:
            return statistics.median(own) + startup
        timing = screened.timing if screened is not None else None
        if timing is None or not timing.steps:
            return self.run_s()
        plan, step_s = self._plan, timing.window_s / timing.steps
        window_s = min(plan.max_time_s, max(plan.min_time_s, plan.min_steps * step_s))
        return screened.wall_s - (screened.startup_s or 0) - timing.window_s + window_s + startup

    def draw_s(self) -> float:
        """What a new draw of the process layout adds to the round it starts (``Launcher.new_draw``): the slowest
        start-up seen beyond the usual one, a fork server's imports where trials fork."""
        with self._lock:
            startups = list(self._startups)
        return max(startups) - statistics.median(startups) if startups else 0.0

    def round_s(self, configurations: list[dict], unknown: int = 0) -> float:
        """The seconds one round of an interleaved comparison of ``configurations`` and ``unknown`` more not known
        yet (finalists to come, each as slow as the slowest measured: ``slowest_s``) is expected to take: a new
        draw, then each configuration's ``repeats`` processes, each after the first a new draw too."""
        runs = [self.run_of_s(knobs) for knobs in configurations] + [self.slowest_s()] * unknown
        draws = 1 + len(runs) * (self.repeats - 1)
        return self.repeats * sum(runs) + draws * self.draw_s()

    def affords_round(self, configurations: list[dict], step: str) -> bool:
        """``affords`` for a round of ``configurations`` (``round_s``)."""
        return self.affords(self.round_s(configurations), step)

    def slowest_s(self) -> float:
        """The longest full-window process expected of a configuration measured so far (``run_of_s``)."""
        with self._lock:
            keys = set(self._full) | set(self._screened)
        return max((self._expected(key) for key in keys), default=self.run_s())

    def screen_s(self) -> float:
        """The seconds a search trial not proposed yet is expected to take: ``repeats`` processes of ``run_s``."""
        return self.repeats * self.run_s(screen=True)

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
