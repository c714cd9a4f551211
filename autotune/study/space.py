"""The search space: candidate values per knob, derived from the machine and pipeline or given by the user.

The space is conditional: a knob that does not apply given the knobs before it (e.g. prefetch_factor
with num_workers=0) is not sampled and takes the value None, so every configuration it yields can run.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import optuna

from autotune.errors import ConfigError
from autotune.knobs import KNOBS, Knob, SearchContext


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values for every knob, in registry order; a knob with one candidate is fixed."""

    candidates: dict[str, list[Any]]

    @cached_property
    def size(self) -> int:
        """The number of distinct runnable configurations (counted once: the tuner asks every trial)."""
        return sum(1 for _ in self.configurations())

    @property
    def varied(self) -> list[str]:
        """Knobs with more than one candidate."""
        return [name for name, values in self.candidates.items() if len(values) > 1]

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """Knob values for ``trial``, define-by-run: only knobs that vary and apply are suggested."""
        knobs: dict[str, Any] = {}
        for name, values in self.candidates.items():
            if not KNOBS[name].active(knobs):
                knobs[name] = None
            elif len(values) == 1:
                knobs[name] = values[0]
            else:
                knobs[name] = trial.suggest_categorical(name, values)
        return knobs

    def configurations(self) -> Iterator[dict[str, Any]]:
        """Every runnable configuration, once each."""
        yield from self._extend({}, list(self.candidates))

    def contains(self, knobs: dict[str, Any]) -> bool:
        chosen: dict[str, Any] = {}
        for name, values in self.candidates.items():
            expected = values if KNOBS[name].active(chosen) else [None]
            if knobs.get(name) not in expected:
                return False
            chosen[name] = knobs[name]
        return True

    def _extend(self, chosen: dict[str, Any], rest: list[str]) -> Iterator[dict[str, Any]]:
        if not rest:
            yield dict(chosen)
            return
        name, *others = rest
        values = self.candidates[name] if KNOBS[name].active(chosen) else [None]
        for value in values:
            yield from self._extend({**chosen, name: value}, others)


def build_space(search: dict[str, list[Any] | None], ctx: SearchContext) -> SearchSpace:
    """Candidates per knob: the user's list where given (each value checked against this machine and
    pipeline), else the knob's defaults for this context; values that mean the same here (``Knob.resolve``) are
    one candidate, spelled as the baseline spells it where it means the baseline's value."""
    candidates = {}
    for name, knob in KNOBS.items():
        given = search.get(name)
        if given is None:
            values = [v for v in knob.default_candidates(ctx) if knob.unavailable_reason(v, ctx) is None]
        else:
            for value in given:
                reason = knob.unavailable_reason(value, ctx)
                if reason:
                    raise ConfigError(f"search.{name}", f"{value!r} cannot run here: {reason}")
            values = list(given)
        if not values:
            raise ConfigError(f"search.{name}", "no candidate value can run on this machine for this pipeline")
        candidates[name] = _one_spelling(knob, values, ctx)
    space = SearchSpace(candidates)
    _check_given_knobs_apply(search, space)
    return space


def _one_spelling(knob: Knob, values: list[Any], ctx: SearchContext) -> list[Any]:
    """``values`` with one value per meaning here, the baseline's own value standing for its meaning: with torch
    starting 2 threads, num_threads 2 is the baseline's null, not a change."""
    baseline = ctx.baseline.get(knob.name)
    baseline_means = knob.resolve(baseline, ctx)
    kept: dict[Any, Any] = {}
    for value in values:
        meaning = knob.resolve(value, ctx)
        kept.setdefault(meaning, baseline if meaning == baseline_means else value)
    return list(kept.values())


def _check_given_knobs_apply(search: dict[str, list[Any] | None], space: SearchSpace) -> None:
    """Reject candidates the user gave for a knob that applies in no configuration of the space (prefetching
    with only num_workers=0): they would be silently ignored."""
    for name, given in search.items():
        if given is None or all(value is None for value in given):
            continue
        if all(knobs[name] is None for knobs in space.configurations()):
            raise ConfigError(
                f"search.{name}", f"{KNOBS[name].inactive_because}, which no configuration of the search space has"
            )


def check_baseline(baseline: dict[str, Any], ctx: SearchContext) -> None:
    """Reject a baseline that cannot produce a single batch (training with full batches only)."""
    if baseline["batch_size"] > ctx.dataset_len:
        raise ConfigError(
            "pipeline.baseline.batch_size",
            f"{baseline['batch_size']} is larger than the dataset ({ctx.dataset_len} samples), so no full batch exists",
        )
