"""Every key of the config, one row each (``KEYS``): the values it takes, the setting it fills, whether it must be
given, and the key it must not fall below or rise above. The loader (``autotune/config/load.py``) validates the
config and builds Settings from these rows alone: a key without a row is refused as unknown."""

from __future__ import annotations

import threading
from dataclasses import MISSING, dataclass, fields
from typing import Any

from autotune.config.settings import MeasureSettings, ScreenPlan, Settings, StudySettings
from autotune.config.values import CoreSets, CountOrAuto, ImportPath, KnobCandidates, KnobValue, Plain, Values
from autotune.errors import ConfigError
from autotune.knobs import BATCH_POLICIES, KNOBS, REQUIRED
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.pipeline.spec import OPTIONAL_COMPONENTS, REQUIRED_COMPONENTS

MODES = ("tune", "selfcheck", "benchmark", "check", "report", "profile")
DEVICES = ("auto", "cpu", "cuda")
OBJECTIVES = (("throughput",), ("throughput", "peak_memory"))


@dataclass(frozen=True)
class Key:
    """One key of the config: its dotted ``path`` and the ``values`` it takes; ``into`` is the dataclass and the
    field it fills (None for the keys the loader gathers into one setting: a pipeline's and the knobs'). A key
    ``required`` must be given; one left out takes its field's default (``default``). Its value must not fall below
    that of the key ``at_least`` names, nor rise above that of ``at_most``'s, and must stay below that of
    ``below``'s."""

    path: str
    values: Values
    into: tuple[type, str] | None = None
    required: bool = False
    at_least: str | None = None
    at_most: str | None = None
    below: str | None = None

    def parse(self, value: Any) -> Any:
        """``value`` parsed; a ConfigError naming this key, in one line, where it is refused."""
        try:
            return self.values.parse(value)
        except ValueError as exc:
            raise ConfigError(self.path, str(exc)) from None

    @property
    def default(self) -> Any:
        """The value a config that leaves this key out gets: its field's default (None without a field)."""
        if self.into is None:
            return None
        found = _field(*self.into)
        return found.default_factory() if found.default_factory is not MISSING else found.default


def _field(owner: type, name: str):
    return next(f for f in fields(owner) if f.name == name)


def _setting(path: str, values: Values, owner: type, name: str, **order: str) -> Key:
    """The row of a key that fills ``owner``'s field ``name``: required where that field has no default."""
    found = _field(owner, name)
    required = found.default is MISSING and found.default_factory is MISSING
    return Key(path, values, (owner, name), required, **order)


def _integer(minimum: int, **bounds: Any) -> Plain:
    return Plain(int, minimum=minimum, **bounds)


def _number(minimum: float, **bounds: Any) -> Plain:
    return Plain(float, minimum=minimum, **bounds)


_POSITIVE = _number(0, above=True)
# The period of a thread's loop, which waits it out (Event.wait): not a loop that never sleeps, nor a wait longer
# than threading.TIMEOUT_MAX, which Event.wait refuses (OverflowError) in that thread, mid-run.
_PERIOD = _number(0.01, maximum=threading.TIMEOUT_MAX)
_POSITIVE_OR_NULL = _number(0, above=True, null=True)
# A study's name (study.name, or by default the pipeline's): '#' marks the studies autotune keeps beside a shared study
# (its claims: autotune/study/sharing.py).
STUDY_NAME = Plain(str, null=True, pattern="[^#]+", what="a printable name without '#'")
_PIPELINE = (
    *(Key(f"pipeline.{name}._target_", ImportPath(), required=True) for name in REQUIRED_COMPONENTS),
    *(
        Key(f"pipeline.baseline.{name}", KnobValue(knob), required=knob.baseline_default is REQUIRED)
        for name, knob in KNOBS.items()
    ),
    Key("pipeline.name", STUDY_NAME),  # null: the name of the pipeline's file
    *(Key(f"pipeline.{name}._target_", ImportPath()) for name in OPTIONAL_COMPONENTS),
)
_SEARCH = (
    *(Key(f"search.{name}", KnobCandidates(knob)) for name, knob in KNOBS.items()),
    _setting("search.batch_policy", Plain(str, choices=BATCH_POLICIES), Settings, "batch_policy"),
)
_STUDY = (
    _setting("study.name", STUDY_NAME, StudySettings, "name"),
    _setting("study.storage", Plain(str), StudySettings, "storage"),
    _setting("study.n_trials", _integer(0), StudySettings, "n_trials"),
    _setting("study.timeout_s", _POSITIVE_OR_NULL, StudySettings, "timeout_s"),
    _setting("study.budget_s", _POSITIVE_OR_NULL, StudySettings, "budget_s"),
    # numpy's and Optuna's samplers take 32-bit seeds
    _setting("study.seed", _integer(0, maximum=2**32 - 1), StudySettings, "seed"),
    _setting("study.memory_budget_mb", _POSITIVE_OR_NULL, StudySettings, "memory_budget_mb"),
    _setting("study.host_memory_budget_mb", _POSITIVE_OR_NULL, StudySettings, "host_memory_budget_mb"),
    _setting("study.max_consecutive_failures", _integer(1), StudySettings, "max_consecutive_failures"),
    _setting("study.confirm_rounds", _integer(0), StudySettings, "confirm_rounds"),
    _setting("study.objectives", Plain(tuple, choices=OBJECTIVES), StudySettings, "objectives"),
    # a fraction below the best: at 1 or more no throughput is that far below it
    _setting(
        "study.prune_margin", _number(0, above=True, maximum=1, below=True, null=True), StudySettings, "prune_margin"
    ),
    _setting("study.probe", Plain(bool), StudySettings, "probe"),
    _setting("study.diagnose", Plain(bool), StudySettings, "diagnose"),
    _setting("study.remeasure_disturbed", Plain(bool), StudySettings, "remeasure_disturbed"),
    _setting("study.heartbeat_s", _PERIOD, StudySettings, "heartbeat_s"),
    _setting("study.parallel", CountOrAuto(), StudySettings, "parallel"),
    _setting("study.cpu_sets", CoreSets(), StudySettings, "cpu_sets"),
)
# torch reads the index of cuda:N as an 8-bit integer (cuda:128 is cuda:-128): two digits at most.
_DEVICE = Plain(
    str, choices=DEVICES, pattern=r"cuda:(0|[1-9][0-9]?)", note="or cuda:N for the GPU of index N (0 to 99)"
)
_MEASURE = (
    _setting("measure.device", _DEVICE, MeasureSettings, "device"),
    _setting("measure.warmup_min_steps", _integer(1), WarmupPolicy, "min_steps"),
    _setting("measure.warmup_max_steps", _integer(1), WarmupPolicy, "max_steps", at_least="measure.warmup_min_steps"),
    _setting("measure.warmup_tolerance", _POSITIVE, WarmupPolicy, "tolerance"),
    # a warm-up as long as the trial's timeout leaves no time to measure: every trial would time out
    _setting(
        "measure.warmup_min_time_s", _number(0, null=True), WarmupPolicy, "min_time_s", below="measure.trial_timeout_s"
    ),
    _setting("measure.min_steps", _integer(1), WindowPlan, "min_steps"),
    _setting("measure.min_time_s", _number(0), WindowPlan, "min_time_s"),
    _setting("measure.max_time_s", _POSITIVE, WindowPlan, "max_time_s", at_least="measure.min_time_s"),
    _setting("measure.screen_min_steps", _integer(1, null=True), ScreenPlan, "min_steps"),
    _setting(
        "measure.screen_min_time_s", _number(0, null=True), ScreenPlan, "min_time_s", at_most="measure.max_time_s"
    ),
    _setting("measure.trial_timeout_s", _POSITIVE, MeasureSettings, "trial_timeout_s", at_least="measure.min_time_s"),
    _setting("measure.memory_interval_s", _PERIOD, MeasureSettings, "memory_interval_s"),
    _setting("measure.repeats", _integer(1), MeasureSettings, "repeats"),
    _setting("measure.loss_tolerance", _POSITIVE, MeasureSettings, "loss_tolerance"),
    _setting("measure.compile_cache_dir", Plain(str, null=True), MeasureSettings, "compile_cache_dir"),
    _setting("measure.fork_trials", Plain(bool), MeasureSettings, "fork_trials"),
    _setting("measure.core_speed", Plain(bool), MeasureSettings, "core_speed"),
)
_MODES = (
    _setting("mode", Plain(str, choices=MODES), Settings, "mode"),
    _setting("selfcheck.rounds", _integer(2), Settings, "selfcheck_rounds"),
    _setting("benchmark.rounds", _integer(2), Settings, "benchmark_rounds"),
    _setting("recommended", Plain(str, null=True, what="the path of a recommended.yaml"), Settings, "recommended"),
    _setting("check.tolerance", _number(0, maximum=1, below=True), Settings, "check_tolerance"),
    _setting("check.rounds", _integer(2), Settings, "check_rounds"),
    _setting(
        "against",
        Plain(str, null=True, what="the path of a tuning run's report.json (or of a check.json that held)"),
        Settings,
        "against",
    ),
    # A leak's trend needs a few readings per third of the sample (autotune/results/diagnosis.py): 6 steps at least.
    _setting("profile.steps", _integer(6), Settings, "profile_steps"),
    _setting("profile.trace_steps", _integer(1), Settings, "profile_trace_steps"),
    _setting("profile.batches", _integer(1), Settings, "profile_batches"),
)
KEYS: dict[str, Key] = {key.path: key for key in (*_PIPELINE, *_SEARCH, *_STUDY, *_MEASURE, *_MODES)}
