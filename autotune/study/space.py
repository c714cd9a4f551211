"""The search space: candidate values per knob, derived from the machine and pipeline or given by the user.

The space is conditional: a knob that does not apply given the knobs before it (e.g. prefetch_factor
with num_workers=0) is not sampled and takes the value None, so every configuration it yields can run. What failed
bounds it (``ruled_out``): a configuration that needs no less memory than one that ran out is not measured
(``needs_no_less_memory``), nor, after an exception in a DataLoader worker and before any configuration with workers
ran, one with workers.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import optuna

from autotune.errors import ConfigError
from autotune.knobs import KNOBS, Knob, SearchContext, Target, conflict, unavailable
from autotune.records import OutOfMemory, WorkerFailure


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values for every knob, in registry order; a knob with one candidate is fixed. No configuration of
    the space holds a conflict (``Knob.conflict``), judged with gradients accumulated up to
    ``effective_batch_size`` (search.batch_policy=fixed_effective; None: no accumulation) on ``device``, the kind
    of device the trials run on (None: not known, judged as a GPU)."""

    candidates: dict[str, list[Any]]
    effective_batch_size: int | None = None
    device: str | None = None

    @cached_property
    def size(self) -> int:
        """The number of distinct runnable configurations (counted once: the tuner asks every trial)."""
        return sum(1 for _ in self.configurations())

    @property
    def varied(self) -> list[str]:
        """Knobs with more than one candidate."""
        return [name for name, values in self.candidates.items() if len(values) > 1]

    def sample(self, trial: optuna.Trial) -> dict[str, Any]:
        """Knob values for ``trial``, define-by-run: only knobs that vary and apply are suggested.

        A proposal that holds a conflict is replaced by the configuration of the space nearest to it (the fewest
        knobs changed; the first in the space's order on a tie): Optuna's distributions must not change from trial
        to trial, so a knob cannot be offered only the values that fit those chosen before it.
        """
        knobs: dict[str, Any] = {}
        for name, values in self.candidates.items():
            if not KNOBS[name].active(knobs):
                knobs[name] = None
            elif len(values) == 1:
                knobs[name] = values[0]
            else:
                knobs[name] = trial.suggest_categorical(name, values)
        if self.conflict(knobs) is None:
            return knobs
        return min(self.configurations(), key=lambda other: sum(other[name] != knobs[name] for name in knobs))

    def draw(self, rng: random.Random) -> dict[str, Any] | None:
        """A configuration drawn with ``rng``: each knob that applies, given those before it, takes one of its
        candidates with equal chance; None where the draw holds a conflict."""
        knobs: dict[str, Any] = {}
        for name, values in self.candidates.items():
            knobs[name] = rng.choice(values) if KNOBS[name].active(knobs) else None
        return knobs if self.conflict(knobs) is None else None

    def configurations(self) -> Iterator[dict[str, Any]]:
        """Every runnable configuration, once each."""
        return (knobs for knobs in self._extend({}, list(self.candidates)) if self.conflict(knobs) is None)

    def contains(self, knobs: dict[str, Any]) -> bool:
        chosen: dict[str, Any] = {}
        for name, values in self.candidates.items():
            expected = values if KNOBS[name].active(chosen) else [None]
            if knobs.get(name) not in expected:
                return False
            chosen[name] = knobs[name]
        return self.conflict(chosen) is None

    def conflict(self, knobs: dict[str, Any]) -> tuple[str, str] | None:
        """The first knob of ``knobs`` whose value cannot run beside the others in this space, and why."""
        return conflict(knobs, self.effective_batch_size, self.device)

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
                if reason := knob.unavailable_reason(value, ctx):
                    raise ConfigError(
                        f"search.{name}", f"{value!r} cannot run here: {reason}; leave it out of the list"
                    )
                # The baseline's own value is measured however wasteful: it is what the user runs today.
                if value != ctx.baseline.get(name) and (reason := knob.wasteful_reason(value, ctx)):
                    raise ConfigError(
                        f"search.{name}", f"{value!r} is not worth a trial here: {reason}; leave it out of the list"
                    )
            values = list(given)
        if not values:
            raise ConfigError(f"search.{name}", "no candidate value can run on this machine for this pipeline")
        candidates[name] = _one_spelling(knob, values, ctx)
    space = SearchSpace(candidates, ctx.effective_batch_size, ctx.device)
    _check_given_values_run(search, space)
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


def _check_given_values_run(search: dict[str, list[Any] | None], space: SearchSpace) -> None:
    """Reject a candidate the user gave that runs in no configuration of the space, as it would be silently ignored:
    one of a knob that applies in none (prefetching with only num_workers=0), or a value that conflicts with every
    configuration it could join (compile=reduce-overhead with only set_to_none=false). A value that conflicts with
    some configurations only is kept, and those are left out, as the space leaves out worker options without
    workers."""
    for name, given in search.items():
        if given is None or all(value is None for value in given):
            continue
        runs, conflicts = set(), {}
        for knobs in space._extend({}, list(space.candidates)):  # conflicts included
            found = space.conflict(knobs)
            if found:
                conflicts.setdefault(knobs[name], found[1])
            else:
                runs.add(knobs[name])
        if runs | set(conflicts) <= {None}:
            raise ConfigError(
                f"search.{name}", f"{KNOBS[name].inactive_because}, which no configuration of the search space has"
            )
        for value in space.candidates[name]:
            if value not in runs:
                reason = conflicts[value]
                raise ConfigError(f"search.{name}", f"{value!r} runs in no configuration of the search space: {reason}")


def check_baseline(baseline: dict[str, Any], ctx: SearchContext) -> None:
    """Reject a baseline with a knob whose value cannot run beside the others on the device the trials run on
    (``conflict``: judged here, where measure.device=auto is resolved, as CUDA graphs conflict on a GPU alone), or
    cannot run here at all (``Knob.unavailable_reason``: a batch larger than the dataset, with full batches only;
    DataLoader workers that each load the same samples of a stream; a model that refuses channels_last). A value
    that runs but gains nothing here (``Knob.wasteful_reason``) is what the user runs today, and is measured."""
    found = conflict(baseline, None, ctx.device)
    if found:
        raise ConfigError(f"pipeline.baseline.{found[0]}", found[1])
    found = unavailable(baseline, ctx)
    if found:
        name, reason = found
        raise ConfigError(
            f"pipeline.baseline.{name}",
            f"{baseline[name]!r} cannot run here: {reason}; give it a value that runs here",
        )


# The knobs that change what a training step keeps in memory: those applied to the model, its precision, its
# optimizer or its gradients.
_STEP_MEMORY = {Target.MODEL, Target.PRECISION, Target.OPTIMIZER, Target.GRADIENTS}
_STEP_MEMORY_KNOBS = tuple(name for name, knob in KNOBS.items() if _STEP_MEMORY & set(knob.applies_to))
_MEMORY_ORDERS = {name: knob.memory_order for name, knob in KNOBS.items() if knob.memory_order}


def needs_no_less_memory(knobs: dict[str, Any], ran_out: dict[str, Any]) -> bool:
    """Whether ``knobs`` needs at least the memory of ``ran_out``, a configuration that ran out of memory (or a probe
    setting, which fixes only the knobs it ran with), so that it would run out too: a batch at least as large, at
    least as many DataLoader workers prefetching at least as many batches each, and the same value of each knob
    applied to the model, its precision or its optimizer (channels_last, amp, compile, optimizer_impl, set_to_none)
    that ``ran_out`` fixes, and of each knob whose values are ordered by memory (``Knob.memory_order``: malloc) a
    value no earlier.

    Why: with those knobs equal, a step keeps the same tensors per sample (the activations, most of its memory at
    the batch sizes that run out) and the same state per model (weights, gradients, optimizer buffers), so a larger
    batch needs more; each worker holds batches of its own, so more workers need more. A change to any of those
    knobs may make a configuration fit where the other did not (half-precision activations, a compiled graph that
    keeps fewer intermediates, gradients freed between steps, an optimizer without multi-tensor buffers), so it is
    measured; so may an allocator that returns the freed memory another keeps. The other knobs change no tensor
    the step keeps (threads, pinned copies of a batch, cuDNN's benchmark: a transient workspace) and are taken to
    need as much.
    """
    if knobs["batch_size"] < ran_out["batch_size"] or knobs["num_workers"] < ran_out["num_workers"]:
        return False
    if (knobs.get("prefetch_factor") or 0) < (ran_out.get("prefetch_factor") or 0):  # fewer batches held ahead
        return False
    if any(
        order.index(knobs[name]) < order.index(ran_out[name])
        for name, order in _MEMORY_ORDERS.items()
        if name in ran_out
    ):
        return False  # a value that keeps less (an allocator that returns freed memory)
    return all(knobs[name] == ran_out[name] for name in _STEP_MEMORY_KNOBS if name in ran_out)


# What rules a configuration out without measuring it: a configuration that ran out of memory (one that needs no less
# would too), or a failure raised in a DataLoader worker (one with workers would fail alike).
KnownFailure = OutOfMemory | WorkerFailure


def ruled_out(knobs: dict[str, Any], known: list[KnownFailure]) -> KnownFailure | None:
    """The first of ``known`` that shows ``knobs`` would fail, if any: one that ran out of memory where ``knobs``
    needs no less memory (``needs_no_less_memory``); a failure in a DataLoader worker where ``knobs`` has workers."""
    for found in known:
        if isinstance(found, WorkerFailure) and knobs["num_workers"] > 0:
            return found
        if isinstance(found, OutOfMemory) and needs_no_less_memory(knobs, found.knobs):
            return found
    return None


def why_ruled_out(found: KnownFailure) -> str:
    """Why a configuration ``found`` rules out was not measured, for its trial and the reports."""
    if isinstance(found, WorkerFailure):
        return (
            f"it loads in DataLoader workers, and {found.shown_by} failed in one ({found.message}) "
            "while no configuration with workers ran; search.num_workers=[0] leaves them out"
        )
    return f"it needs no less memory than {found.shown_by}, which ran out ({found.message})"
