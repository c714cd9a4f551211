"""Validated settings as frozen dataclasses; library code takes these, never a DictConfig."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from autotune.measure.memory import MemoryBudget
from autotune.measure.recorder import WindowPlan
from autotune.pipeline.spec import PipelineSpec

# Heartbeats a trial may miss before it is taken for dead: its tuner may be slow to write one (a busy storage server,
# a long garbage collection), never by several intervals.
STALE_BEATS = 4


@dataclass(frozen=True)
class StudySettings:
    """Where the Optuna study lives and how much tuning it may do.

    ``memory_budget_mb`` bounds the limiting memory (``MemoryReport.limiting``: the GPU's on CUDA, the host process
    tree's on CPU), ``host_memory_budget_mb`` the host process tree on any device: a trial whose peak ends over
    either is infeasible, and one whose host tree crosses its ``watched_budget`` while it runs is stopped as out of
    memory. ``max_consecutive_failures`` failed trials in a row stop the study.
    The finalists (the fastest trials) race the baseline again for up to ``confirm_rounds`` interleaved
    rounds before one is recommended. ``objectives`` is ("throughput",) or ("throughput", "peak_memory") for a
    Pareto front. A trial whose running throughput falls ``prune_margin`` (a fraction) below the best so
    far is pruned; None never prunes. ``probe`` measures the loader and the model step apart first, to
    steer the search. A tuner says every ``heartbeat_s`` that its running trial is alive; a trial of a shared study
    (``autotune/study/storage.py``) not heard of for ``STALE_BEATS`` of them is failed and measured again.
    ``parallel`` trials run at once ("auto": one per visible GPU), each in a slot of its own: a GPU, or one of the
    ``cpu_sets`` (``autotune/trial/placement.py``).
    ``diagnose`` profiles the baseline and the recommendation after the race (``autotune/study/profiles.py``).
    ``budget_s`` bounds the whole run: a step starts only where it fits (``RunClock.affords``).
    ``remeasure_disturbed`` measures again a run of the baseline, a race, mode=benchmark or mode=check that something
    beside it disturbed (``TrialResult.disturbed``, ``autotune/study/disturbed.py``).
    """

    name: str
    storage: str
    n_trials: int
    timeout_s: float | None
    seed: int
    memory_budget_mb: float | None = None
    max_consecutive_failures: int = 5
    confirm_rounds: int = 3
    objectives: tuple[str, ...] = ("throughput",)
    prune_margin: float | None = 0.25
    probe: bool = True
    diagnose: bool = True
    host_memory_budget_mb: float | None = None
    heartbeat_s: float = 15.0
    parallel: int | str = 1
    budget_s: float | None = None
    remeasure_disturbed: bool = True
    cpu_sets: tuple[tuple[int, ...], ...] | None = None

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    def watched_budget(self, device: str) -> MemoryBudget | None:
        """The budget the tuner holds a running trial's host process tree to: on a CPU the tighter of
        ``memory_budget_mb`` and ``host_memory_budget_mb``, on a GPU ``host_memory_budget_mb``.

        The tuner can read only the host tree from outside the trial, cheaply and while it runs; CUDA's peaks are read
        inside the trial at its window's close, so a GPU's budget is judged on the trial's result (``within_budget``).
        """
        keys = {"study.host_memory_budget_mb": self.host_memory_budget_mb}
        if not device.startswith("cuda"):  # "cuda" or "cuda:N"
            keys["study.memory_budget_mb"] = self.memory_budget_mb
        budgets = [MemoryBudget(key, mb) for key, mb in keys.items() if mb is not None]
        return min(budgets, key=lambda budget: budget.mb, default=None)


@dataclass(frozen=True)
class ScreenPlan:
    """The search trials' shorter window where it differs from the full one: at least ``min_steps`` steps and
    ``min_time_s`` seconds (None: as the full window)."""

    min_steps: int | None = None
    min_time_s: float | None = None

    def of(self, plan: WindowPlan) -> WindowPlan:
        """``plan`` with these where given."""
        return replace(
            plan,
            min_steps=plan.min_steps if self.min_steps is None else self.min_steps,
            min_time_s=plan.min_time_s if self.min_time_s is None else self.min_time_s,
        )


@dataclass(frozen=True)
class MeasureSettings:
    """How each trial is measured. ``device`` is "auto", "cpu", "cuda" or "cuda:N"; ``plan`` is the window of the
    baseline and of the finalists' race, ``screen_plan`` the shorter one of search trials; ``repeats`` is the
    number of processes each configuration is measured in (the median is kept). A trial's first-step loss
    under AMP or compile may differ from the fp32 eager loss by ``loss_tolerance`` (relative) at most.
    torch.compile trials of a study share the cache in ``compile_cache_dir``/STUDY (None: torch's default).
    ``fork_trials``: each trial forked from a fork server that imported torch once (``autotune/trial/zygote.py``),
    not a fresh interpreter: it starts in milliseconds, and reads what a fresh one reads (``benchmarks/forked.py``);
    each round of an interleaved comparison forks from a new server (``Launcher.new_draw``). ``core_speed``: the
    tuner times its cores just before and after every run (``autotune/measure/core_speed.py``)."""

    device: str
    plan: WindowPlan
    screen_plan: WindowPlan
    trial_timeout_s: float
    memory_interval_s: float
    repeats: int = 1
    loss_tolerance: float = 0.05
    compile_cache_dir: str | None = None
    fork_trials: bool = True
    core_speed: bool = True


@dataclass(frozen=True)
class Settings:
    """Everything one autotune run needs. ``search`` maps knob name to candidates, None = derived;
    ``batch_policy`` is "free" (batch size varies) or "fixed_effective" (micro-batch x accumulation
    steps = the baseline's batch size). ``mode`` is "tune"; "selfcheck": the harness against a plain loop
    for ``selfcheck_rounds`` interleaved rounds (the study's recommendation, or the one in the file ``recommended``);
    "benchmark": the recommendation in the file ``recommended`` against the baseline, with each change's share, for
    ``benchmark_rounds`` interleaved rounds; or "check": the
    recommendation in the report.json (or a check.json) ``against`` against the baseline for ``check_rounds``
    interleaved rounds, failing where its speedup fell more than ``check_tolerance`` (a fraction) beyond the noise;
    or "profile": the baseline taken apart in one profiling run (``profile_steps`` steps timed stage by stage or more,
    ``profile_trace_steps`` under torch.profiler, ``profile_batches`` batches loaded under cProfile)."""

    pipeline: PipelineSpec
    baseline: dict[str, Any]
    search: dict[str, list[Any] | None]
    study: StudySettings
    measure: MeasureSettings
    batch_policy: str = "free"
    mode: str = "tune"
    selfcheck_rounds: int = 5
    benchmark_rounds: int = 5
    recommended: str | None = None
    against: str | None = None
    check_tolerance: float = 0.10
    check_rounds: int = 5
    profile_steps: int = 30
    profile_trace_steps: int = 5
    profile_batches: int = 10
