"""The study's sampler: Optuna's, except for the trial a tuner asks for with a proposal of its own.

A tuner's proposal (the guide's, a configuration its machine owes, an untried one) must be measured by that tuner.
Optuna's queue of waiting trials cannot carry it: every tuner of a shared study asks from that queue, so another
tuner, of any machine, could take it first. A proposal held by the asking thread cannot be taken by anyone else.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState


class ProposingSampler(BaseSampler):
    """``base`` samples every trial, except one asked for inside ``proposing(params)`` in the same thread: it takes
    ``params`` for the parameters it suggests, as an enqueued trial takes its fixed parameters (a parameter the
    proposal does not name is ``base``'s). Trials asked for at the same time by other threads, or by other tuners of
    the study, are ``base``'s."""

    def __init__(self, base: BaseSampler) -> None:
        self._base = base
        self._held = threading.local()

    def __getstate__(self) -> dict[str, Any]:
        return {"_base": self._base}  # what threads hold is theirs: a copy holds nothing

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_base"])  # type: ignore[misc]

    @contextmanager
    def proposing(self, params: dict[str, Any] | None) -> Iterator[None]:
        """Within this block, trials this thread asks for take ``params`` (None: ``base`` proposes)."""
        held = self._proposed()
        self._held.params = params
        try:
            yield
        finally:
            self._held.params = held

    def _proposed(self) -> dict[str, Any] | None:
        return getattr(self._held, "params", None)

    def reseed_rng(self) -> None:
        self._base.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._proposed() is not None:
            return {}  # every parameter the proposal names is sampled independently, below
        return self._base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if self._proposed() is not None:
            return {}
        return self._base.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        proposed = self._proposed()
        if proposed is not None and param_name in proposed:
            return proposed[param_name]
        return self._base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._base.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self._base.after_trial(study, trial, state, values)


def proposing(study: optuna.Study, params: dict[str, Any] | None) -> AbstractContextManager[None]:
    """``ProposingSampler.proposing`` of ``study``'s sampler (``open_study`` gives every study one); with no
    ``params``, any sampler proposes."""
    if params is None:
        return nullcontext()
    sampler = study.sampler
    if not isinstance(sampler, ProposingSampler):
        raise TypeError(f"the study's sampler is {type(sampler).__name__}, not the ProposingSampler open_study gives")
    return sampler.proposing(params)
