"""A study opened: created, or joined where one of the same settings exists (a resume, or another tuner), with the
sampler every study gets; one made with other settings is refused, naming what differs."""

from __future__ import annotations

import contextlib
import hashlib
import json
import warnings
from dataclasses import fields
from typing import Any

import optuna

from autotune.code_digest import same_code
from autotune.config.settings import StudySettings
from autotune.errors import StudyMismatchError
from autotune.measure.environment import describe_machine, machine_id
from autotune.measure.warmup import WarmupPolicy
from autotune.records import BASELINE_ATTR, MACHINE_ATTR, META_ATTR, on_machine
from autotune.study.proposing import ProposingSampler
from autotune.study.sharing import describing, description, fail_interrupted_trials, fail_stale_trials, running_trials
from autotune.study.storage import create_study, is_shared, opening

_DIRECTIONS = {"throughput": "maximize", "peak_memory": "minimize"}


def open_study(
    settings: StudySettings,
    meta: dict[str, Any],
    machine: dict[str, Any] | None = None,
    storage: optuna.storages.BaseStorage | None = None,
    code: dict[str, str] | None = None,
) -> optuna.Study:
    """Create the study, or load it if it exists with the same settings (a resume, or another tuner joining it).

    ``meta`` describes what is tuned (pipeline, baseline, space, measurement); a stored study
    with a different description is refused rather than mixed with this one. ``machine`` (``describe_machine``) is
    stored under its ``machine_id`` (None: this machine): each machine's results are its own; ``storage``: the one
    ``open_storage(settings.storage)`` opened (None: opened here); ``code``: the pipeline's modules by a digest of
    their source (``user_code``), kept beside ``meta`` and compared apart. The sampler is
    multivariate TPE with conditional groups, since knobs interact and some apply only given others.
    A storage that cannot be opened, or fails before this returns, is a ConfigError naming study.storage and the
    cause (``autotune/study/storage.py``); a fault later raises StorageFaultError.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # "group" is experimental
        sampler = ProposingSampler(
            optuna.samplers.TPESampler(
                seed=settings.seed, n_startup_trials=_startup_trials(settings.n_trials), multivariate=True, group=True
            )
        )
    with opening(settings.storage):  # a storage fault before the run starts refuses it
        study = create_study(
            settings.storage,
            storage,
            study_name=settings.name,
            sampler=sampler,
            directions=[_DIRECTIONS[objective] for objective in settings.objectives],
            load_if_exists=True,
        )
        _adopt(study, meta, settings, code or {})
        machine = describe_machine() if machine is None else machine
        machine_attr = on_machine(MACHINE_ATTR, machine_id(machine))
        if machine_attr not in study.user_attrs:
            study.set_user_attr(machine_attr, machine)
    return study


def _adopt(study: optuna.Study, meta: dict[str, Any], settings: StudySettings, code: dict[str, str]) -> None:
    """Store ``meta`` in a new study (on a shared storage, of tuners making it at once, the first's:
    ``sharing.description``), or in one that holds no measurement and no other tuner can join (its baseline failed:
    the user mends the config and runs again); refuse a stored one made with other settings; fail what a killed run
    left (on a shared storage, what a dead tuner left: the others' trials run on). The pipeline's ``code`` is
    compared apart (``_check_code``), and the modules the study lacks added to it (``_add_code``). Descriptions are
    compared in the form stored, not as ``StudyDescription`` reads it: one it cannot read, or reads with the defaults of
    an earlier autotune, is refused naming what differs."""
    fingerprint = _fingerprint(meta)
    described = {**meta, "fingerprint": fingerprint, **({"code": code} if code else {})}
    if BASELINE_ATTR in study.user_attrs:  # records of one machine, not kept per machine: an earlier autotune's
        raise StudyMismatchError(
            f"study.name: study '{study.study_name}' was made by an earlier autotune, whose records this one does not "
            "read; pass study.name=NEW_NAME to start another study (mode=report of an earlier autotune renders it)"
        )
    if is_shared(settings.storage):
        stored = description(study, described, settings)
    else:
        stored = study.user_attrs.get(META_ATTR)
        if stored is None or _holds_nothing(study, settings):
            study.set_user_attr(META_ATTR, described)
            stored = described
    if stored.get("fingerprint") != fingerprint and not _alike(stored, meta):
        left_out = _not_kept(stored)
        differences = _differences(_as_now(stored, left_out), _as_now(meta, left_out)) or ["how it was described"]
        derived = " (a search space not given is derived from the machine, by the rules of the autotune that runs)"
        derived = derived if "space." in " ".join(differences) else ""
        raise StudyMismatchError(
            f"study.name: study '{study.study_name}' in the storage was created with other settings: "
            f"{'; '.join(differences[:4])}{'; …' if len(differences) > 4 else ''}{derived}; set them back, or pass "
            "study.name=NEW_NAME to start another study"
        )
    _check_code(study, stored, code)
    if not code.keys() <= (stored.get("code") or {}).keys():  # modules first read now, or a study from before
        _add_code(study, code, settings)
    if is_shared(settings.storage):
        fail_stale_trials(study)
    else:
        fail_interrupted_trials(study, running_trials(study))


def _check_code(study: optuna.Study, stored: dict[str, Any], code: dict[str, str]) -> None:
    """Refuse the pipeline's ``code`` where a module the description ``stored`` measured was edited (``_edited``)."""
    if edited := _edited(stored.get("code") or {}, code):
        raise StudyMismatchError(
            f"study.name: the code of the pipeline's modules changed since study '{study.study_name}' measured it "
            f"({', '.join(edited[:4])}{', …' if len(edited) > 4 else ''}): its figures are the old code's; pass "
            "study.name=NEW_NAME to measure the code as it is, or undo the edit (mode=report renders the study as "
            "stored)"
        )


def _add_code(study: optuna.Study, code: dict[str, str], settings: StudySettings) -> None:
    """Add to the study's description the modules of ``code`` it lacks, checked against it as it is stored now. On a
    shared storage, read and written while this tuner holds the description (``sharing.describing``): two tuners
    joining at once each add to what the other wrote, and the second finds an edit of a module the first added.
    A SQLite study has one tuner (``autotune/study/lock.py``), which writes alone."""
    with describing(study, settings) if is_shared(settings.storage) else contextlib.nullcontext():
        stored = study.user_attrs[META_ATTR]
        _check_code(study, stored, code)
        measured_with = stored.get("code") or {}
        if (known := {**code, **measured_with}) != measured_with:
            study.set_user_attr(META_ATTR, {**stored, "code": known})


def _edited(stored: dict[str, str], now: dict[str, str]) -> list[str]:
    """The modules both runs read whose code differs (``code_digest.same_code``: a comment, a reformat or a docstring
    edit is no edit, and a study an earlier autotune stored is compared by the file's bytes): a module one run
    imported and the other did not (a lazy import, a cache already filled) is no edit."""
    return [name for name in stored if name in now and not same_code(stored[name], now[name])]


# What a study's description holds that an earlier autotune's did not: its memory budgets.
_KEPT_SINCE = ("study",)


def _alike(stored: dict[str, Any], meta: dict[str, Any]) -> bool:
    """Whether ``stored`` describes the settings of ``meta`` as an earlier autotune wrote them (``_as_now``): it
    resumes (where it lacks the budgets, under those given now)."""
    left_out = _not_kept(stored)
    return _fingerprint(_as_now(stored, left_out)) == _fingerprint(_as_now(meta, left_out))


def _not_kept(stored: dict[str, Any]) -> set[str]:
    """The keys of ``_KEPT_SINCE`` that ``stored``, written by an earlier autotune, lacks."""
    return {key for key in _KEPT_SINCE if key not in stored}


def _as_now(described: dict[str, Any], left_out: set[str]) -> dict[str, Any]:
    """``described`` (a stored description, or this run's) as this autotune writes it, to compare: without its
    fingerprint, its code and the keys ``left_out``, each measure warm-up's ``span`` of None written as the span it
    stands for (``WarmupPolicy.compared``: 4 at the default, which earlier autotunes wrote out)."""
    plain = json.loads(json.dumps(described, default=str))
    plain = {key: value for key, value in plain.items() if key not in {"fingerprint", "code", *left_out}}
    measure = plain.get("measure") or {}
    for warmup in measure.get("warmup"), (measure.get("screen") or {}).get("warmup"):
        if isinstance(warmup, dict) and warmup.get("span") is None and isinstance(warmup.get("min_steps"), int):
            warmup["span"] = WarmupPolicy(min_steps=warmup["min_steps"]).compared
    return plain


def _holds_nothing(study: optuna.Study, settings: StudySettings) -> bool:
    """Whether ``study`` holds no measurement (no trial, and no baseline on any machine) and optimises what
    ``settings`` asks for (Optuna keeps a study's directions from its creation)."""
    baselines = on_machine(BASELINE_ATTR, "")
    directions = [direction.name.lower() for direction in study.directions]
    return (
        directions == [_DIRECTIONS[objective] for objective in settings.objectives]
        and not study.get_trials(deepcopy=False)
        and not any(key.startswith(baselines) for key in study.user_attrs)
    )


def _differences(stored: dict[str, Any], now: dict[str, Any], prefix: str = "") -> list[str]:
    """Where a stored study's description differs from this run's: each key by its dotted path, with both values
    where they are short."""
    found = []
    for key in sorted((set(stored) | set(now)) - {"fingerprint"}):
        before, after, path = stored.get(key), now.get(key), f"{prefix}{key}"
        if isinstance(before, dict) and isinstance(after, dict):
            found += _differences(before, after, f"{path}.")
        elif json.dumps(before, sort_keys=True) != json.dumps(after, sort_keys=True):  # as the fingerprint reads them
            values, key = f"{json.dumps(before)} → {json.dumps(after)}", _config_key(path)
            found.append(f"{key} {values}" if len(values) <= 60 else key)
    return found


# The names of StudySettings' fields: one a description keeps at its top level (objectives) is set as study.NAME.
_STUDY_KEYS = frozenset(field.name for field in fields(StudySettings))


def _config_key(path: str) -> str:
    """The config key of a description's dotted ``path``: a pipeline's components are stored under "components", which
    the user's keys do not name (``pipeline.model.channels``); a study's setting at the top level is under study."""
    if path.startswith("pipeline.components."):
        return "pipeline." + path.removeprefix("pipeline.components.")
    return f"study.{path}" if path in _STUDY_KEYS else path


def _fingerprint(meta: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(meta, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _startup_trials(n_trials: int) -> int:
    """Random proposals before TPE models the results: Optuna's 10, fewer on small budgets."""
    return max(3, min(10, n_trials // 2))
