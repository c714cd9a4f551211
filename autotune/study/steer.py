"""Steer the search with the differential probe: predict every configuration's throughput from the
DataLoader and the model step timed apart, and measure the most promising ones first.

The prediction is a guide, not a result: rankings and the recommendation come only from full
measured runs. Without workers, loading and compute run one after the other (1/(1/L + 1/C)); with
workers they overlap (min(L, C)), and on a CPU they also share the cores: a sample then needs at least
(loading CPU time + threads x compute time) / cores, and compute threads beyond the cores the workers
leave free are counted as gaining nothing (oversubscribed OpenMP threads measured worse, never better;
where the model step was not timed with the free thread count, compute is scaled down in proportion).
Compute settings are timed one knob at a time
around the anchor (the baseline, made to fit the space) and combined as independent factors; a knob
whose every value changes the model step by less than 3 % is left at the anchor's value when choosing.
torch.compile is not probed (one compile costs more than the whole probe); it is left to the full trials.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import optuna

from autotune.knobs import KNOBS
from autotune.study.space import SearchSpace
from autotune.study.tuner import PROBE_ATTR
from autotune.trial.probe import LOADER_KNOBS, ProbePlan, ProbeResult
from autotune.trial.result import TrialResult

# Knobs timed on a cached batch; compile and the worker options are not.
COMPUTE_KNOBS = ("num_threads", "channels_last", "amp", "optimizer_impl", "set_to_none")
# A compute knob whose values all change the model step by less than this is not worth a trial of its own.
_NEGLIGIBLE = 0.03
# Preferred values of the worker options in steered configurations: PyTorch's default prefetching, and
# workers that are not restarted each epoch.
_WORKER_OPTIONS = {"prefetch_factor": 2, "persistent_workers": True}


@dataclass(frozen=True)
class Steering:
    """A probe's plan and result, and what they predict. ``cores``: the CPU cores training runs on, when
    compute runs on them too (None on a GPU)."""

    plan: ProbePlan
    result: ProbeResult
    cores: int | None = None

    def loader(self, batch_size: int, num_workers: int) -> float:
        index = self.plan.loaders.index({"batch_size": batch_size, "num_workers": num_workers})
        return self.result.loader_throughputs[index]

    def compute(self, knobs: dict[str, Any]) -> float:
        """Model-step samples/s of ``knobs``: the anchor's at this batch size, times each compute knob's
        measured factor at the anchor's batch size."""
        anchor = self.plan.computes[0]
        rate = self._compute_of({**anchor, "batch_size": knobs["batch_size"]})
        for name in COMPUTE_KNOBS:
            if knobs[name] != anchor[name]:
                rate *= self._compute_of({**anchor, name: knobs[name]}) / self._compute_of(anchor)
        return rate

    def predict(self, knobs: dict[str, Any]) -> float:
        loading = self.loader(knobs["batch_size"], knobs["num_workers"])
        compute = self.compute(knobs)
        if knobs["num_workers"] == 0:
            return 1 / (1 / loading + 1 / compute)
        threads = None
        if self.cores is not None:
            threads = min(knobs["num_threads"] or self.cores, self.cores)
            free = max(1, self.cores - knobs["num_workers"])
            if threads > free:
                # Oversubscribed cores: compute threads beyond those the workers leave free gain nothing. Where
                # that thread count was not timed, compute is taken to scale with threads: a pessimistic bound,
                # yet oversubscribed OpenMP threads measured worse still (tabular_mlp, docs/benchmarks.md).
                if self._timed_threads(free):
                    compute = self.compute({**knobs, "num_threads": free})
                else:
                    compute *= free / threads
                threads = free
        seconds = max(1 / loading, 1 / compute)
        if threads is not None:
            seconds = max(seconds, (self._loading_cpu_s(knobs["batch_size"]) + threads / compute) / self.cores)
        return 1 / seconds

    def _timed_threads(self, threads: int) -> bool:
        return any(k["num_threads"] == threads for k in self.plan.computes)

    def negligible(self, name: str) -> bool:
        """Whether every timed value of compute knob ``name`` changed the model step by less than 3 %."""
        anchor = self.plan.computes[0]
        factors = [
            self._compute_of(k) / self._compute_of(anchor) for k in self.plan.computes if k[name] != anchor[name]
        ]
        return all(abs(factor - 1) < _NEGLIGIBLE for factor in factors)

    def _loading_cpu_s(self, batch_size: int) -> float:
        """CPU seconds per sample of loading, from the loader timed with the fewest workers."""
        timed = [s for s in self.plan.loaders if s["batch_size"] == batch_size]
        fewest = min(timed, key=lambda s: s["num_workers"])
        return max(fewest["num_workers"], 1) / self.loader(batch_size, fewest["num_workers"])

    def _compute_of(self, knobs: dict[str, Any]) -> float:
        return self.result.compute_throughputs[self.plan.computes.index(knobs)]


def probe_plan(space: SearchSpace, baseline: dict[str, Any], seconds: float = 0.5) -> ProbePlan:
    """Every loader setting (batch size x workers), the anchor's model step at every batch size, and the
    anchor with one compute knob changed, for every other value of each compute knob."""
    candidates = space.candidates
    loaders = [{"batch_size": b, "num_workers": w} for b in candidates["batch_size"] for w in candidates["num_workers"]]
    anchor = anchor_knobs(space, baseline)
    computes = [anchor] + [{**anchor, "batch_size": b} for b in candidates["batch_size"] if b != anchor["batch_size"]]
    for name in COMPUTE_KNOBS:
        computes += [{**anchor, name: value} for value in candidates[name] if value != anchor[name]]
    return ProbePlan(loaders, computes, seconds)


def anchor_knobs(space: SearchSpace, baseline: dict[str, Any]) -> dict[str, Any]:
    """The baseline, each knob moved to the space's first candidate where the space lacks its value;
    no workers and no compile, which the compute probe leaves out."""
    anchor = {
        name: baseline[name] if baseline[name] in values else values[0] for name, values in space.candidates.items()
    }
    return {**anchor, "num_workers": 0, "prefetch_factor": None, "persistent_workers": None, "compile": "off"}


def most_promising(steering: Steering, space: SearchSpace, baseline: dict[str, Any], count: int) -> list[dict]:
    """The ``count`` configurations of ``space`` with the highest predicted throughput, other than the
    baseline; compile as in the baseline where the space allows, worker options preferred as above."""
    anchor = {**anchor_knobs(space, baseline), "compile": _baseline_or_first(space, baseline, "compile")}
    varied = [
        name
        for name in (*LOADER_KNOBS, *COMPUTE_KNOBS)
        if len(space.candidates[name]) > 1 and not (name in COMPUTE_KNOBS and steering.negligible(name))
    ]
    predicted: list[tuple[float, dict[str, Any]]] = []
    for values in itertools.product(*(space.candidates[name] for name in varied)):
        knobs = {**anchor, **dict(zip(varied, values, strict=True))}
        if knobs["num_workers"] > 0:
            knobs.update({name: _worker_option(space, name) for name in _WORKER_OPTIONS})
        if knobs != baseline and space.contains(knobs):
            predicted.append((steering.predict(knobs), knobs))
    predicted.sort(key=lambda pair: -pair[0])
    return [knobs for _, knobs in predicted[:count]]


def enqueue(study: optuna.Study, space: SearchSpace, configurations: list[dict[str, Any]]) -> None:
    """Make ``configurations`` the next trials the study proposes (only varied, applicable knobs are params)."""
    for knobs in configurations:
        params = {name: knobs[name] for name in space.varied if KNOBS[name].active(knobs)}
        study.enqueue_trial(params, skip_if_exists=True)


def steered_count(n_trials: int) -> int:
    """How many of the trials the probe chooses: a third of the budget, 1 to 3."""
    return max(1, min(3, n_trials // 3))


def probe_and_enqueue(
    study: optuna.Study,
    space: SearchSpace,
    baseline: dict[str, Any],
    n_trials: int,
    run_probe: Callable[[ProbePlan], TrialResult],
    cores: int | None = None,
) -> dict[str, Any]:
    """Run the probe once per study, enqueue the most promising configurations, and store what was found
    (reused on resume). Returns the stored record; a probe that fails is recorded and the search goes on.
    ``cores``: the CPU cores when training computes on the CPU (see Steering)."""
    stored = study.user_attrs.get(PROBE_ATTR)
    if stored is not None:
        return stored
    plan = probe_plan(space, baseline)
    result = run_probe(plan)
    if not result.ok or result.probe is None:
        record = {"failure": str(result.failure), "wall_s": result.wall_s}
    else:
        steering = Steering(plan, result.probe, cores)
        chosen = most_promising(steering, space, baseline, steered_count(n_trials))
        enqueue(study, space, chosen)
        anchor = anchor_knobs(space, baseline)
        workers = _baseline_or_first(space, baseline, "num_workers")  # the baseline's, if the probe timed it
        record = {
            "plan": asdict(plan),
            "result": result.probe.to_dict(),
            "wall_s": result.wall_s,
            "baseline_loader_sps": steering.loader(anchor["batch_size"], workers),
            "baseline_compute_sps": steering.compute(anchor),
            "enqueued": [{**knobs, "predicted_sps": steering.predict(knobs)} for knobs in chosen],
        }
    study.set_user_attr(PROBE_ATTR, record)
    return record


def _baseline_or_first(space: SearchSpace, baseline: dict[str, Any], name: str) -> Any:
    values = space.candidates[name]
    return baseline[name] if baseline[name] in values else values[0]


def _worker_option(space: SearchSpace, name: str) -> Any:
    values = space.candidates[name]
    return _WORKER_OPTIONS[name] if _WORKER_OPTIONS[name] in values else values[0]
