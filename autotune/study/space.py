"""The search space: candidate values per knob, derived from the machine and pipeline or given by the user."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from optuna.distributions import CategoricalDistribution

from autotune.errors import ConfigError
from autotune.knobs import KNOBS, SearchContext


@dataclass(frozen=True)
class SearchSpace:
    """Candidate values for every knob, in registry order; a knob with one candidate is fixed."""

    candidates: dict[str, list[Any]]

    @property
    def size(self) -> int:
        return math.prod(len(values) for values in self.candidates.values())

    def distributions(self) -> dict[str, CategoricalDistribution]:
        """Optuna distributions of the knobs that vary."""
        return {name: CategoricalDistribution(values) for name, values in self.candidates.items() if len(values) > 1}

    def contains(self, knobs: dict[str, Any]) -> bool:
        return all(knobs.get(name) in values for name, values in self.candidates.items())

    def complete(self, params: dict[str, Any]) -> dict[str, Any]:
        """All knob values: ``params`` for the varied knobs, the single candidate for fixed ones."""
        return {name: params[name] if name in params else values[0] for name, values in self.candidates.items()}


def build_space(search: dict[str, list[Any] | None], ctx: SearchContext) -> SearchSpace:
    """Candidates per knob: the user's list where given (each value checked against this machine and
    pipeline), else the knob's defaults for this context."""
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
        candidates[name] = values
    return SearchSpace(candidates)


def check_baseline(baseline: dict[str, Any], ctx: SearchContext) -> None:
    """Reject a baseline that cannot produce a single batch (training with full batches only)."""
    if baseline["batch_size"] > ctx.dataset_len:
        raise ConfigError(
            "pipeline.baseline.batch_size",
            f"{baseline['batch_size']} is larger than the dataset ({ctx.dataset_len} samples), so no full batch exists",
        )
