"""Where a tuning run's own time went: each stage of the run (the inspect subprocess, the baseline, the probe, the
search, the race, the trim, the profiles), split into the phases of its trial processes (start-up, build, warm-up,
compile, timed windows, the rest of each process), its waits for other tuners of a shared study, its parallel slots'
idle time, and the tuner's own work between them.

A run records what it measures (``RunTime``: each stage's wall time and its processes' phases, summed as they end,
its waits and idle slots; ``autotune/study/clock.py`` times them) and stores it in the study as it goes, one record
per run of the study on a machine; the tuner's own work is what remains of each stage's wall time, and of the run's
outside its stages. The phases therefore add up to the run's wall time (from ``app.run`` to the reports, whose
rendering follows), and a phase read from a trial that came out negative would show time counted twice.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from autotune.records import TUNER_TIME_ATTR, on_machine
from autotune.trial.result import TrialResult

# The stages of a run, in order; TUNER is the run's time outside any of them (opening the study, reading results).
STAGES = ("inspect", "baseline", "probe", "search", "race", "trim", "profiles")
TUNER = "tuner"
# Waiting for other tuners of a shared study (their trials and searches on this machine, their turn at ending the
# study: ``autotune/study/sharing.py``), and a parallel slot's idle time (study.parallel: nothing left to run in it
# while another slot's process still runs). Neither is the tuner's own work.
WAITING, IDLE = "waiting", "idle"
# The phases of a trial process, the waits and idle slots, then the tuner's own work. "other": what a process spent
# after its build outside warm-up and windows (DataLoader shutdown, the FLOP count, memory reads, exit; the inspect's
# reading of the facts); "stopped": processes the tuner stopped (pruned, timed out, over the memory budget, or with
# the run: Ctrl-C) or that crashed, of which no breakdown came back.
PHASES = (
    "startup", "build", "warmup", "compile", "windows", "probing", "profiling", "other", "stopped", WAITING, IDLE, TUNER
)  # fmt: skip
PHASE_WORDS = {
    "startup": "start-up",
    "build": "build",
    "warmup": "warm-up",
    "compile": "compile",
    "windows": "timed windows",
    "probing": "probing",
    "profiling": "profiling",
    "other": "rest of trials",
    "stopped": "stopped trials",
    WAITING: "waiting for other tuners",
    IDLE: "idle parallel slots",
    TUNER: "the tuner's own work",
}
STAGE_WORDS = {**{stage: stage for stage in STAGES}, "inspect": "inspect subprocess", TUNER: "outside the stages"}


def process_phases(result: TrialResult) -> dict[str, float]:
    """The seconds of one trial process's ``result`` by phase, summing to its ``wall_s``: start-up (interpreter and
    imports, or the fork), build, and for a measuring trial its warm-up (compile apart) and timed window; the rest of
    a probe's or profiling run's time is its probing or profiling, the rest of any other's is "other". A process
    that left no result of its own (``startup_s`` is set by the process) is "stopped" as a whole."""
    if result.startup_s is None:
        return {"stopped": result.wall_s}
    parts = {"startup": result.startup_s, "build": result.build_s or 0.0}
    timing = result.timing
    if timing is not None:
        parts |= {"warmup": timing.warmup_s - timing.compile_s, "compile": timing.compile_s, "windows": timing.window_s}
    rest = "probing" if result.probe is not None else "profiling" if result.profile is not None else "other"
    parts[rest] = result.wall_s - sum(parts.values())
    return parts


def run_attr(machine: str, run: str) -> str:
    """The study attribute of run ``run``'s record on ``machine``: one per run, so that runs of one study (resumed,
    or tuners sharing it) never overwrite each other's."""
    return f"{on_machine(TUNER_TIME_ATTR, machine)}#{run}"


# How the steps of the search are named in ``RunTime.left_out``: the probe, and search trials (``study/clock.span``).
PROBE_STEP, SEARCH_TRIAL_STEP = "the probe", "search trial"
SEARCH_STEPS = (PROBE_STEP, SEARCH_TRIAL_STEP)
# What a tuner of a shared study left, its budget spent, to another of its machine still searching, measuring or ending
# the study (``sharing.finishing``: ``Turn.LEFT``).
LEFT_TO_OTHERS_STEP = "the race, trim and profiles (another tuner of this machine is still at the study)"
# What a run left to the tuner that took it for dead (not heard of: paused, suspended, or its clock behind) and took
# its turn: not study.budget_s's doing (``RunTime.left_to_others``).
TAKEN_OVER_STEP = "the race, trim and profiles (another tuner took this one for dead and took its turn)"


@dataclass(frozen=True)
class Foretold:
    """What a run foretold of its rest (``autotune/study/forecast.py``): ``at_s`` seconds into it, ``rest_s`` more."""

    at_s: float
    rest_s: float


@dataclass(frozen=True)
class RunTime:
    """One run's time as measured: it started at ``started_at`` (seconds since the epoch) and lasted ``wall_s`` up to
    its last record; ``stages``: each stage's wall time; ``processes``: stage → phase → seconds of its trial
    processes, its waits for other tuners (``WAITING``) and its slots' idle time (``IDLE``) (with ``study.parallel``
    trials at once, each counts its share: its seconds over the slots).
    ``finished``: the run reached its end (False: stopped, or still going when last stored). ``budget_s``: its
    study.budget_s, and ``left_out``: the steps that budget left out, or left to another tuner (``left_to_others``),
    in words. ``foretold``: what it said its rest would take, once its first search trial was measured (None: it
    said nothing)."""

    started_at: float
    wall_s: float
    stages: dict[str, float]
    processes: dict[str, dict[str, float]]
    finished: bool = False
    budget_s: float | None = None
    left_out: list[str] = field(default_factory=list)
    foretold: Foretold | None = None

    @property
    def left_to_others(self) -> bool:
        """Whether this run left the study's end to another tuner of its machine (``LEFT_TO_OTHERS_STEP``), or to one
        that took it for dead (``TAKEN_OVER_STEP``)."""
        return LEFT_TO_OTHERS_STEP in self.left_out or TAKEN_OVER_STEP in self.left_out

    @property
    def search_left_out(self) -> list[str]:
        """Of ``left_out``, the steps of the search: the probe and search trials (``SEARCH_STEPS``)."""
        return [step for step in self.left_out if step.startswith(SEARCH_STEPS)]

    def seconds(self) -> dict[str, dict[str, float]]:
        """Stage (TUNER: outside the stages) → phase → seconds, the tuner's own work included: all of it sums to
        ``wall_s``."""
        outside = self.wall_s - sum(self.stages.values())
        split = {}
        for stage, wall in [*self.stages.items(), (TUNER, outside)]:
            parts = dict(self.processes.get(stage, {}))
            parts[TUNER] = wall - sum(parts.values())
            split[stage] = parts
        return split

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunTime:
        foretold = data.get("foretold")  # a record stored before forecasts has none
        return cls(**{**data, "foretold": Foretold(**foretold) if foretold else None})


@dataclass(frozen=True)
class TunerTime:
    """The time of every run of a study on one machine, in the order they started (a resumed study has several)."""

    runs: list[RunTime]

    @property
    def wall_s(self) -> float:
        return sum(run.wall_s for run in self.runs)

    def by_stage(self) -> dict[str, dict[str, float]]:
        """Stage → phase → seconds over every run, stages in run order and phases in PHASES order."""
        summed: dict[str, dict[str, float]] = {}
        for run in self.runs:
            for stage, parts in run.seconds().items():
                for phase, seconds in parts.items():
                    summed.setdefault(stage, {}).setdefault(phase, 0.0)
                    summed[stage][phase] += seconds
        order = [*STAGES, TUNER]
        return {
            stage: {phase: summed[stage][phase] for phase in PHASES if phase in summed[stage]}
            for stage in sorted(summed, key=lambda name: order.index(name) if name in order else len(order))
        }

    def phases(self) -> dict[str, float]:
        """Phase → seconds over every stage and run."""
        by_stage = self.by_stage().values()
        return {
            phase: sum(parts[phase] for parts in by_stage if phase in parts)
            for phase in PHASES
            if any(phase in parts for parts in by_stage)
        }

    def stages(self) -> dict[str, float]:
        """Stage → seconds over every run."""
        return {stage: sum(parts.values()) for stage, parts in self.by_stage().items()}

    def to_dict(self) -> dict[str, Any]:
        return {"runs": [run.to_dict() for run in self.runs]}


def load_tuner_time(attrs: dict[str, Any], machine: str) -> TunerTime | None:
    """The runs' records that a study's attributes ``attrs`` hold of ``machine``; None where there are none (a study
    tuned by an earlier autotune)."""
    prefix = run_attr(machine, "")
    runs = [RunTime.from_dict(value) for key, value in attrs.items() if key.startswith(prefix)]
    return TunerTime(sorted(runs, key=lambda run: run.started_at)) if runs else None


def shares(seconds: dict[str, float]) -> dict[str, float]:
    """Each entry's share of their sum (all 0.0 where it is 0)."""
    total = sum(seconds.values())
    return {name: value / total if total > 0 and math.isfinite(total) else 0.0 for name, value in seconds.items()}
