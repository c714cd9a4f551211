"""Validate the composed config (as plain data) into Settings, naming the key of any error."""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from hydra.utils import get_object

from autotune.config.settings import MeasureSettings, Settings, StudySettings
from autotune.errors import ConfigError
from autotune.knobs import BASELINE_DEFAULTS, KNOBS, conflict
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.pipeline.spec import OPTIONAL_COMPONENTS, REQUIRED_COMPONENTS, PipelineSpec

Parser = Callable[[Any], Any]

BATCH_POLICIES = ("free", "fixed_effective")
OBJECTIVES = ("throughput", "peak_memory")
DEVICES = ("auto", "cpu", "cuda")
MODES = ("tune", "selfcheck", "benchmark", "check", "report")
_PLAN_KEYS = (
    "warmup_min_steps",
    "warmup_max_steps",
    "warmup_tolerance",
    "warmup_min_time_s",
    "min_steps",
    "min_time_s",
    "max_time_s",
)


def load_settings(config: dict[str, Any], pipeline_choice: str | None) -> Settings:
    """Turn the composed config into Settings; ``pipeline_choice`` is the pipeline file's name."""
    if config.get("pipeline") is None:
        raise ConfigError("pipeline", "no pipeline chosen; run e.g. python -m autotune pipeline=mymodel")
    _check_keys(
        config,
        "",
        required=("pipeline", "search", "study", "measure"),
        optional=("mode", "selfcheck", "benchmark", "recommended", "check", "against"),
    )
    pipeline = _mapping(config["pipeline"], "pipeline")
    spec = _pipeline_spec(pipeline, pipeline_choice)
    study = _section(config["study"], "study", _STUDY_FIELDS)
    measure = _section(config["measure"], "measure", _MEASURE_FIELDS)
    plan = _window_plan(measure)
    screen_plan = _screen_plan(measure, plan)
    check = _section(config.get("check", {"tolerance": 0.10, "rounds": 5}), "check", _CHECK_FIELDS)
    return Settings(
        pipeline=spec,
        baseline=_baseline(pipeline.get("baseline"), "pipeline.baseline"),
        search=_search(config["search"], "search"),
        batch_policy=_batch_policy(config["search"]),
        study=StudySettings(**{**study, "name": study["name"] or spec.name}),
        measure=MeasureSettings(plan=plan, screen_plan=screen_plan, **measure),
        mode=_mode(config),
        selfcheck_rounds=_section(config.get("selfcheck", {"rounds": 5}), "selfcheck", _ROUNDS_FIELDS)["rounds"],
        benchmark_rounds=_section(config.get("benchmark", {"rounds": 5}), "benchmark", _ROUNDS_FIELDS)["rounds"],
        recommended=_path(config.get("recommended"), "recommended", "a recommended.yaml"),
        against=_path(config.get("against"), "against", "a tuning run's report.json"),
        check_tolerance=check["tolerance"],
        check_rounds=check["rounds"],
    )


def is_report(config: dict[str, Any]) -> bool:
    """Whether the composed config asks for mode=report."""
    return _mode(config) == "report"


def load_report_study(config: dict[str, Any]) -> tuple[str, str]:
    """The study mode=report re-renders: (name, storage URL); the name must be given, as no pipeline is."""
    study = _section(config["study"], "study", _STUDY_FIELDS)
    if not study["name"]:
        raise ConfigError("study.name", "mode=report re-renders a stored study: give study.name=NAME")
    return study["name"], study["storage"]


def _window_plan(measure: dict[str, Any]) -> WindowPlan:
    """Take the warm-up and window keys out of ``measure`` and check they agree."""
    fields = {key: measure.pop(key) for key in _PLAN_KEYS}
    for low, high in (("min_time_s", "max_time_s"), ("warmup_min_steps", "warmup_max_steps")):
        if fields[high] < fields[low]:
            raise ConfigError(
                f"measure.{high}", f"must be >= measure.{low}, but got {high}={fields[high]} < {low}={fields[low]}"
            )
    warmup = WarmupPolicy(
        min_steps=fields.pop("warmup_min_steps"),
        max_steps=fields.pop("warmup_max_steps"),
        tolerance=fields.pop("warmup_tolerance"),
        min_time_s=fields.pop("warmup_min_time_s"),
    )
    return WindowPlan(warmup=warmup, **fields)


def _screen_plan(measure: dict[str, Any], plan: WindowPlan) -> WindowPlan:
    """The search trials' window: ``plan`` with the screen_* keys (taken out of ``measure``) where given."""
    min_steps, min_time_s = measure.pop("screen_min_steps"), measure.pop("screen_min_time_s")
    if min_time_s is not None and min_time_s > plan.max_time_s:
        raise ConfigError(
            "measure.screen_min_time_s",
            f"must be <= measure.max_time_s, but got {min_time_s} > {plan.max_time_s}",
        )
    return replace(
        plan,
        min_steps=plan.min_steps if min_steps is None else min_steps,
        min_time_s=plan.min_time_s if min_time_s is None else min_time_s,
    )


def _pipeline_spec(pipeline: dict[str, Any], choice: str | None) -> PipelineSpec:
    _check_keys(
        pipeline, "pipeline", required=(*REQUIRED_COMPONENTS, "baseline"), optional=("name", *OPTIONAL_COMPONENTS)
    )
    name = pipeline.get("name") or choice
    if not isinstance(name, str) or not name:
        raise ConfigError("pipeline.name", f"expected a non-empty string, got {name!r}")
    components = {key: pipeline.get(key) for key in (*REQUIRED_COMPONENTS, *OPTIONAL_COMPONENTS)}
    for key, node in components.items():
        if node is not None or key in REQUIRED_COMPONENTS:
            _check_target(node, f"pipeline.{key}")
    return PipelineSpec(name=name, components=components)


def _check_target(node: Any, path: str) -> None:
    if not isinstance(node, dict) or "_target_" not in node:
        raise ConfigError(
            path, f"expected a mapping with a _target_ (e.g. {{_target_: torch.nn.Linear, ...}}), got {node!r}"
        )
    target = node["_target_"]
    if not isinstance(target, str) or not target:
        raise ConfigError(f"{path}._target_", f"expected a dotted import path, got {target!r}")
    try:
        with _quiet_hydra_logger():
            get_object(target)
    except Exception as exc:
        module = target.rsplit(".", 1)[0]
        raise ConfigError(
            f"{path}._target_",
            f"cannot import '{target}' ({type(exc.__cause__ or exc).__name__}); is module '{module}' "
            "in the current directory or on PYTHONPATH?",
        ) from exc


@contextmanager
def _quiet_hydra_logger():
    """hydra.utils logs a multi-line error before raising; the raised error is reported instead."""
    logger = logging.getLogger("hydra.utils")
    disabled, logger.disabled = logger.disabled, True
    try:
        yield
    finally:
        logger.disabled = disabled


def _baseline(node: Any, path: str) -> dict[str, Any]:
    baseline = _mapping(node, path)
    required = tuple(name for name in KNOBS if name not in BASELINE_DEFAULTS)
    _check_keys(baseline, path, required=required, optional=tuple(BASELINE_DEFAULTS))
    merged = {**BASELINE_DEFAULTS, **baseline}
    parsed: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        key = f"{path}.{name}"
        if knob.active(parsed):
            parsed[name] = _parse_knob(knob, merged[name], key)
        elif name in baseline and baseline[name] is not None:
            raise ConfigError(key, f"{knob.inactive_because}; remove it or set it to null")
        else:
            parsed[name] = None
    found = conflict(parsed)
    if found:
        raise ConfigError(f"{path}.{found[0]}", found[1])
    return parsed


def _search(node: Any, path: str) -> dict[str, list[Any] | None]:
    search = _mapping(node, path)
    _check_keys(search, path, required=(), optional=(*KNOBS, "batch_policy"), what="knob")
    result: dict[str, list[Any] | None] = {}
    for name, knob in KNOBS.items():
        candidates = search.get(name)
        key = f"{path}.{name}"
        if candidates is None:
            result[name] = None
            continue
        if not isinstance(candidates, list):
            candidates = [candidates]
        if not candidates:
            raise ConfigError(key, "the candidate list is empty; give at least one value, or null to derive them")
        parsed = [_parse_knob(knob, value, key) for value in candidates]
        result[name] = list(dict.fromkeys(parsed))
    return result


def _batch_policy(search: dict[str, Any]) -> str:
    try:
        return _string(choices=BATCH_POLICIES)(search.get("batch_policy", "free"))
    except ValueError as exc:
        raise ConfigError("search.batch_policy", str(exc)) from None


def _path(value: Any, key: str, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ConfigError(key, f"expected the path of {what}, got {value!r}")
    return value


def _mode(config: dict[str, Any]) -> str:
    try:
        return _string(choices=MODES)(config.get("mode", "tune"))
    except ValueError as exc:
        raise ConfigError("mode", str(exc)) from None


def _objectives(value: Any) -> tuple[str, ...]:
    values = tuple(value) if isinstance(value, list) else (value,)
    if values not in (("throughput",), OBJECTIVES):
        raise ValueError(f"expected [throughput] or [throughput, peak_memory], got {value!r}")
    return values


def _parse_knob(knob, value: Any, key: str) -> Any:
    try:
        return knob.parse(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None


def _section(node: Any, path: str, fields: dict[str, Parser]) -> dict[str, Any]:
    section = _mapping(node, path)
    _check_keys(section, path, required=tuple(fields), optional=())
    parsed = {}
    for key, parse in fields.items():
        try:
            parsed[key] = parse(section[key])
        except ValueError as exc:
            raise ConfigError(f"{path}.{key}", str(exc)) from None
    return parsed


def _mapping(node: Any, path: str) -> dict[str, Any]:
    if not isinstance(node, dict):
        raise ConfigError(path, f"expected a mapping, got {node!r}")
    return node


def did_you_mean(name: str, known: list[str], section: str) -> str:
    """``"did you mean SECTION.KEY? "`` for the key of ``known`` closest to the misspelt ``name``, or ``""``."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)  # 0.6 offers num_workers for num_threads
    return f"did you mean {section + '.' if section else ''}{close[0]}? " if close else ""


def _check_keys(node: dict, path: str, required: tuple, optional: tuple, what: str = "key") -> None:
    allowed = (*required, *optional)
    for key in node:
        if key not in allowed:
            full = f"{path}.{key}" if path else str(key)
            hint = did_you_mean(str(key), list(allowed), path)
            raise ConfigError(full, f"unknown {what}; {hint}expected one of: {', '.join(allowed)}")
    for key in required:
        if key not in node:
            raise ConfigError(f"{path}.{key}" if path else key, "is missing")


def _number(
    minimum: float, integer: bool = False, strict: bool = False, optional: bool = False, maximum: float | None = None
) -> Parser:
    """A parser of a finite number (nan and inf are refused: nan compares false with every bound and would pass
    them) at least, or with ``strict`` above, ``minimum``, and at most ``maximum``."""
    kind = "an integer" if integer else "a number"
    bound = (f"> {minimum}" if strict else f">= {minimum}") + (f" and <= {maximum}" if maximum is not None else "")

    def parse(value: Any) -> Any:
        if value is None and optional:
            return None
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type or not _within(value, minimum, strict, maximum):
            raise ValueError(f"expected {kind} {bound}{' or null' if optional else ''}, got {value!r}")
        return value

    return parse


def _within(value: float, minimum: float, strict: bool, maximum: float | None) -> bool:
    above = value > minimum if strict else value >= minimum
    return math.isfinite(value) and above and (maximum is None or value <= maximum)


def _fraction(value: Any) -> float:
    """A share of a whole, short of all of it: 0 <= value < 1."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"expected a number >= 0 and < 1, got {value!r}")
    return value


def _string(optional: bool = False, choices: tuple[str, ...] = ()) -> Parser:
    def parse(value: Any) -> Any:
        if value is None and optional:
            return None
        if not isinstance(value, str) or not value or (choices and value not in choices):
            expected = f"one of {', '.join(choices)}" if choices else "a non-empty string"
            raise ValueError(f"expected {expected}, got {value!r}")
        return value

    return parse


def _device(value: Any) -> str:
    """One of DEVICES, or cuda:N (N >= 0): the GPU of index N among the visible ones (checked against the machine
    once its devices are known: ``DeviceFacts.resolve``)."""
    if isinstance(value, str) and re.fullmatch(r"cuda:\d+", value):
        return value
    try:
        return _string(choices=DEVICES)(value)
    except ValueError as exc:
        raise ValueError(f"{exc}; or cuda:N for the GPU of index N") from None


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"expected true or false, got {value!r}")
    return value


_STUDY_FIELDS: dict[str, Parser] = {
    "name": _string(optional=True),
    "storage": _string(),
    "n_trials": _number(0, integer=True),
    "timeout_s": _number(0, strict=True, optional=True),
    "seed": _number(0, integer=True, maximum=2**32 - 1),  # numpy's and Optuna's samplers take 32-bit seeds
    "memory_budget_mb": _number(0, strict=True, optional=True),
    "host_memory_budget_mb": _number(0, strict=True, optional=True),
    "max_consecutive_failures": _number(1, integer=True),
    "confirm_rounds": _number(0, integer=True),
    "objectives": _objectives,
    "prune_margin": _number(0, strict=True, optional=True),
    "probe": _bool,
}
_MEASURE_FIELDS: dict[str, Parser] = {
    "device": _device,
    "warmup_min_steps": _number(1, integer=True),
    "warmup_max_steps": _number(1, integer=True),
    "warmup_tolerance": _number(0, strict=True),
    "warmup_min_time_s": _number(0, optional=True),
    "min_steps": _number(1, integer=True),
    "min_time_s": _number(0),
    "max_time_s": _number(0, strict=True),
    "screen_min_steps": _number(1, integer=True, optional=True),
    "screen_min_time_s": _number(0, optional=True),
    "trial_timeout_s": _number(0, strict=True),
    "memory_interval_s": _number(0, strict=True),
    "repeats": _number(1, integer=True),
    "loss_tolerance": _number(0, strict=True),
    "compile_cache_dir": _string(optional=True),
}
_ROUNDS_FIELDS: dict[str, Parser] = {"rounds": _number(2, integer=True)}
_CHECK_FIELDS: dict[str, Parser] = {"tolerance": _fraction, **_ROUNDS_FIELDS}
