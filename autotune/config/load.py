"""Validate the composed config (as plain data) by the table of its keys (``keys.py``) into Settings, naming the key
of any error."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from autotune.config.keys import KEYS, STUDY_NAME
from autotune.config.settings import MeasureSettings, ScreenPlan, Settings, StudySettings
from autotune.config.values import shown
from autotune.errors import ConfigError
from autotune.knobs import KNOBS, Knob
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.pipeline.spec import OPTIONAL_COMPONENTS, REQUIRED_COMPONENTS, PipelineSpec

_COMPONENTS = (*REQUIRED_COMPONENTS, *OPTIONAL_COMPONENTS)
_COMPONENT_PATHS = frozenset(f"pipeline.{name}" for name in _COMPONENTS)
# What a command without pipeline=NAME is told (a tuning run's, or a benchmark's or check's of its recommendation).
NO_PIPELINE = (
    "no pipeline chosen; add pipeline=NAME: e.g. python -m autotune pipeline=mymodel, or with mode=benchmark or "
    "mode=check the pipeline the recommendation was tuned for"
)


def load_settings(config: dict[str, Any], pipeline_choice: str | None) -> Settings:
    """Turn the composed config into Settings; ``pipeline_choice`` is the pipeline file's name."""
    if config.get("pipeline") is None:
        raise ConfigError("pipeline", NO_PIPELINE)
    values = _values(config, "")
    spec = _pipeline_spec(config["pipeline"], values.get("pipeline.name"), pipeline_choice)
    study = _build(StudySettings, values)
    plan = _build(WindowPlan, values, warmup=_build(WarmupPolicy, values))
    return _build(
        Settings,
        values,
        pipeline=spec,
        baseline=_baseline(values),
        search={name: values.get(f"search.{name}") for name in KNOBS},
        study=replace(study, name=study.name or spec.name),
        measure=_build(MeasureSettings, values, plan=plan, screen_plan=_build(ScreenPlan, values).of(plan)),
    )


def is_report(config: dict[str, Any]) -> bool:
    """Whether the composed config asks for mode=report."""
    return KEYS["mode"].parse(config.get("mode", KEYS["mode"].default)) == "report"


def load_report_study(config: dict[str, Any]) -> tuple[str, str]:
    """The study mode=report re-renders: (name, storage URL); the name must be given, as no pipeline is. Every other
    key is validated as in the other modes, but a pipeline's, which mode=report reads none of: a bad value is refused
    wherever it is given, not ignored."""
    values = _values(config, "", unread="pipeline")
    if not values["study.name"]:
        raise ConfigError("study.name", "mode=report re-renders a stored study: give study.name=NAME")
    return values["study.name"], values["study.storage"]


def unknown_key(section: str, name: str, present: Iterable[str] = ()) -> ConfigError:
    """The refusal of the key ``name`` of the mapping at ``section`` ("": the top level) that the config does not
    hold: one rule for a key written in a file (``_walk``) and one given on the command line without ``+`` that the
    composed config lacks (``autotune/cli_errors.py``). ``present``: the keys the mapping holds, where the table
    does not govern it (a component's arguments, Hydra's own keys).

    A key of the table that the file leaves unset is no typo: it is added with ``+KEY=VALUE``. A top-level key
    written inside the pipeline (``search:`` in a pipeline's file) is said to be top-level. Another key of a mapping
    the table governs is unknown, with the keys it takes; so is one of Hydra's own (``hydra.*``), whose mappings
    hold only the keys Hydra reads (one added with ``+`` changes nothing); elsewhere it may be a key the file lacks."""
    key = f"{section}.{name}" if section else name
    if section.partition(".")[0] == "hydra":
        hint = did_you_mean(name, list(present), section)
        listed = f"expected one of: {', '.join(present)}" if present else "check the spelling"
        return ConfigError(key, f"unknown key; {hint}{listed}")
    if key in KEYS or key in _TREE:
        where = "the pipeline's file" if key.startswith("pipeline.") else "the config"
        return ConfigError(key, f"not set in {where}; add it with +{_settable(key)}=VALUE")
    if section == "pipeline" and name in _TREE[""] and name != "pipeline":
        top = f"{name}.KEY" if name in _TREE else name
        return ConfigError(key, f"not a pipeline key: {name} is top-level; give it on the command line as {top}=VALUE")
    if section in _TREE and section not in _COMPONENT_PATHS:
        allowed = list(_TREE[section])
        hint = did_you_mean(name, list(dict.fromkeys([*allowed, *present])), section, _elsewhere(section, name))
        what = "knob" if section == "search" else "key"
        return ConfigError(key, f"unknown {what}; {hint}expected one of: {', '.join(allowed)}")
    hint = did_you_mean(name, list(present), section).strip()
    return ConfigError(
        key, f"unknown key; {hint or f'check the spelling, or add a key the file lacks with +{key}=VALUE'}"
    )


def _elsewhere(section: str, name: str) -> list[str]:
    """The keys and mappings of the table named ``name`` in another mapping than ``section`` (device=cuda for
    measure.device=cuda, n_trials=20 for study.n_trials=20, model= for pipeline.model)."""
    here = f"{section}.{name}" if section else name
    return [key for key in dict.fromkeys([*KEYS, *_TREE]) if key != here and key.rsplit(".", 1)[-1] == name]


def _settable(path: str) -> str:
    """The key of the table at or under ``path`` that an override sets: ``path`` itself, or for a mapping its first
    key that must be given (else its first)."""
    while path not in KEYS:
        children = _TREE[path]
        path = f"{path}.{next((name for name, required in children.items() if required), next(iter(children)))}"
    return path


def did_you_mean(name: str, known: list[str], section: str, elsewhere: Sequence[str] = ()) -> str:
    """``"did you mean SECTION.KEY? "`` for the key of ``known`` closest to the misspelt ``name`` (or ``name`` with
    two neighbouring letters swapped), and the keys ``elsewhere`` (of other mappings: ``_elsewhere``) beside it;
    ``""`` where there are none."""
    # 0.6 offers num_workers for num_threads; a swap scores below 0.8 in a short name (dri for dir: 0.67)
    close = [key for key in known if _swapped(name, key)][:1] or difflib.get_close_matches(name, known, 1, 0.8)
    named = [f"{section + '.' if section else ''}{key}" for key in close]
    named += [key for key in elsewhere if key not in named]
    return f"did you mean {' or '.join(named)}? " if named else ""


def _swapped(name: str, key: str) -> bool:
    """Whether ``key`` is ``name`` with two neighbouring characters swapped."""
    return any(key == f"{name[:i]}{name[i + 1]}{name[i]}{name[i + 2 :]}" for i in range(len(name) - 1))


def _tree() -> dict[str, dict[str, bool]]:
    """Each mapping of the config by its path ("": the whole): its keys, in the table's order, and whether each must
    be given (a mapping must where a key in it must)."""
    tree: dict[str, dict[str, bool]] = {}
    for key in KEYS.values():
        parts = key.path.split(".")
        for depth, name in enumerate(parts):
            children = tree.setdefault(".".join(parts[:depth]), {})
            children[name] = children.get(name, False) or key.required
    return tree


_TREE = _tree()


def _values(node: dict[str, Any], path: str, unread: str | None = None) -> dict[str, Any]:
    """The parsed value of every key of the table given in the mapping ``node`` at ``path``, and the default of every
    key under ``path`` left out that fills a field; ConfigError naming the first key refused. ``unread``: a key of
    ``node`` the mode reads nothing under (mode=report's pipeline), neither checked nor required."""
    found: dict[str, Any] = {}
    _walk(node, path, found, unread)
    prefix = f"{path}." if path else ""
    for key in KEYS.values():
        if key.into and key.path.startswith(prefix) and key.path not in found:
            found[key.path] = key.default
    _check_order(found)
    return found


def _walk(node: dict[str, Any], path: str, found: dict[str, Any], unread: str | None = None) -> None:
    children = _TREE[path]
    if path not in _COMPONENT_PATHS:  # a component's other keys are the arguments of its _target_
        _check_known(node, path)
    for name, required in children.items():
        full = f"{path}.{name}" if path else name
        if name == unread:
            continue
        if full in KEYS and name in node:
            found[full] = KEYS[full].parse(node[name])
        elif node.get(name) is not None:
            _walk(_mapping(node[name], full), full, found)
        elif required:
            raise ConfigError(full, "is missing")


def _mapping(node: Any, path: str) -> dict[str, Any]:
    if path in _COMPONENT_PATHS and not (isinstance(node, dict) and "_target_" in node):
        raise ConfigError(
            path, f"expected a mapping with a _target_ (e.g. {{_target_: torch.nn.Linear, ...}}), got {shown(node)}"
        )
    if not isinstance(node, dict):
        raise ConfigError(path, f"expected a mapping, got {shown(node)}")
    return node


def _check_known(node: dict, path: str) -> None:
    for key in node:
        if key not in _TREE[path]:
            raise unknown_key(path, key if isinstance(key, str) and key.isprintable() else shown(key))  # on one line


# The orders a key may keep with another (``Key``): the field that names the other key, the test its value passes
# against the other's, the rule as a refusal states it, and the sign between two values that break it.
_ORDERS = (
    ("at_least", operator.ge, ">=", "<"),
    ("at_most", operator.le, "<=", ">"),
    ("below", operator.lt, "<", ">="),
)


def _check_order(values: dict[str, Any]) -> None:
    """Refuse a value below that of its key's ``at_least``, above that of its ``at_most``, or not below that of its
    ``below``, naming its key."""
    for key in KEYS.values():
        value = values.get(key.path)
        for order, holds, rule, broken in _ORDERS:
            other = getattr(key, order)
            bound = values.get(other) if other else None
            if value is not None and bound is not None and not holds(value, bound):
                raise ConfigError(
                    key.path, f"must be {rule} {other}, but got {_pair(key.path, value, other, bound, broken)}"
                )


def _pair(path: str, value: Any, other: str, other_value: Any, sign: str) -> str:
    """``NAME=VALUE < OTHER=VALUE``: the two values that compare wrongly, by the last part of their keys."""
    return f"{path.rpartition('.')[2]}={shown(value)} {sign} {other.rpartition('.')[2]}={shown(other_value)}"


def _build(owner: type, values: dict[str, Any], **built: Any) -> Any:
    """An ``owner`` of the values of the keys that fill its fields, and of the fields ``built`` from several keys."""
    filled = {key.into[1]: values[key.path] for key in KEYS.values() if key.into and key.into[0] is owner}
    return owner(**filled, **built)


def _pipeline_spec(pipeline: dict[str, Any], name: str | None, choice: str | None) -> PipelineSpec:
    """The pipeline named ``name`` (pipeline.name, parsed), else by the name of its file (``choice``), which must make
    a study's name as pipeline.name must (``STUDY_NAME``)."""
    if not name and choice:
        try:
            name = STUDY_NAME.parse(choice)
        except ValueError as exc:
            raise ConfigError(
                "pipeline", f"the file's name names the study: {exc}; rename the file, or give pipeline.name"
            ) from None
    if not name:
        raise ConfigError("pipeline.name", "the pipeline has no name: choose it by pipeline=NAME or give pipeline.name")
    return PipelineSpec(name=name, components={key: pipeline.get(key) for key in _COMPONENTS})


def _baseline(values: dict[str, Any]) -> dict[str, Any]:
    """The baseline's knob values, in registry order: a knob left out runs its default; one that does not apply given
    the knobs before it (worker options without workers) is None, and may not be set to anything else. Values that
    cannot run together (``conflict``: some on a GPU alone) are refused once the device is known, by
    ``autotune.study.space.check_baseline``."""
    parsed: dict[str, Any] = {}
    for name, knob in KNOBS.items():
        key = f"pipeline.baseline.{name}"
        value = values.get(key, knob.baseline_default)
        if knob.active(parsed):
            parsed[name] = _knob_null(knob, key) if value is None else value
        elif key in values and value is not None:
            raise ConfigError(key, f"{knob.inactive_because}; remove it or set it to null")
        else:
            parsed[name] = None
    return parsed


def _knob_null(knob: Knob, key: str) -> Any:
    """Null for a knob that applies: its own verdict (num_threads' null is torch's default; a switch refuses it)."""
    try:
        return knob.parse(None)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from None
