"""Choose each next trial from the probe's predictions corrected by what the trials measured, and stop the
search once no configuration left is predicted to beat the best one measured (or to come within noise of it).

The probe (``probe_model.ProbeModel``) predicts a configuration from the DataLoader and the model step timed apart. It
misses what only the whole pipeline shows: handing batches between processes, workers and compute competing for caches,
torch.compile. So every prediction is scaled by the measured/predicted ratio of the measured configurations in its
group: the same number of workers and the same values of the knobs the probe does not time (``UNTIMED_KNOBS``); without
a measurement in its group, by those with the same worker setting (with or without workers), then by all with the same
untimed values. A configuration that changes an untimed knob (a compiled one, say) is predicted as its plain form
(measured, or predicted as above) times the factor by which that change moved the measured twins of the same kind. A
configuration whose untimed values were never measured gets no prediction until its "twin" is measured: the best
configuration so far with one untimed knob changed. A cheap knob's first twin is tried once nothing is predicted to beat
the best, before the configurations predicted within noise below it (its effect carries over to every configuration;
theirs rarely beats the best); compile's once the timed knobs have converged (last, as it is the costliest), after the
best configuration's neighbouring batch sizes: the probe's loader timings are short, and batch size is the knob it
predicts least well; so are those of the fastest configuration of each other worker count whose run came within one
run's noise of the best (``_rivals``): one low run would otherwise write off its group. A compute knob's value whose
model step the probe read faster but within its noise is no candidate (``ProbeModel.told_apart``): it is measured on the
best, as a cheap untimed knob's first twin is, where no measured configuration holds it yet, and on the best the search
converged to, after its neighbouring batch sizes. A configuration that needs no less memory than one that ran out (in
the probe or a trial: ``space.needs_no_less_memory``) is never proposed, nor one with workers after an exception in a
DataLoader worker while none with workers ran (``space.ruled_out``), nor one whose loader or model step setting raised
in the probe (``ProbeModel.raised``): its trial would fail the same way.

This is how the search uses the structure of the problem rather than only black-box sampling: the first
trials are the predicted best, every measurement corrects the predictions of its neighbours, and the search
ends as soon as nothing unmeasured is predicted faster, instead of spending a fixed budget.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from autotune.knobs import COMPUTE_KNOBS, KNOBS, LOADER_KNOBS, UNTIMED_KNOBS, WORKER_OPTIONS, costly
from autotune.records import ProbeRecord, config_key
from autotune.study.probe_model import ProbeModel, anchor_knobs, worker_option
from autotune.study.search_state import Observation, Proposal
from autotune.study.space import KnownFailure, SearchSpace, ruled_out

# A configuration predicted within this fraction of the best measured one is still worth a trial: about one run's
# noise, so a lucky reading of the best, or a prediction a little off, does not end the search too soon.
WORTH_MEASURING = 0.05
# A measured configuration of another worker count this close below the best may be the faster one: about one run's
# noise (6-20 % on our build machines, docs/benchmarks.md).
RIVAL_WINDOW = 0.15
# How much torch.compile could at most speed up the model step, for deciding whether a compile twin is worth its
# compile time: where even a step this much faster cannot beat the best (data-bound), compile is not tried.
COMPILE_UPSIDE = 2.0


@dataclass(frozen=True)
class Guide:
    """Proposes the next configuration to measure (``propose``), or None once the search has converged."""

    probe_model: ProbeModel
    space: SearchSpace
    baseline: dict[str, Any]

    def propose(
        self, observations: list[Observation], measured: set[str], failed: list[KnownFailure]
    ) -> Proposal | None:
        """The unmeasured configuration with the highest corrected prediction, if it beats the best feasible
        throughput so far (a compiled one by WORTH_MEASURING: each costs a compile), or any while nothing measured
        is feasible or corrects the probe's predictions; else the best's first twin by a cheap untimed knob whose
        effect no measurement shows yet; else its first doubtful twin (``_doubtful_twins``) whose value no measured
        configuration holds; else the highest predicted within WORTH_MEASURING below the best; else
        the first unmeasured check of the best: its neighbouring batch sizes, those of its rivals (``_rivals``),
        its compute knobs at values the probe read faster within its noise (``_doubtful_twins``), then its
        worthwhile twins by an untimed knob (such a twin's prediction is unknown until one of its kind is
        measured); else None. ``measured`` holds the keys (``config_key``) of every configuration measured or
        failed, so none is proposed twice; none that one of ``failed`` rules out (``ruled_out``: out of memory,
        a failure in a DataLoader worker), or whose loader or model step setting raised in the probe, is proposed
        at all."""

        def may_measure(knobs: dict[str, Any]) -> bool:
            # A trial is not spent on a failure already known: out of memory (bounded by memory), one in a DataLoader
            # worker, or the probe's loader or model step raising at this very setting (a stream too short for a
            # batch in each worker, a forward that rejects the batch size).
            return (
                config_key(knobs) not in measured
                and ruled_out(knobs, failed) is None
                and self.probe_model.raised(knobs) is None
            )

        best = max((o for o in observations if o.feasible), key=lambda o: o.throughput, default=None)
        ratios = _Ratios(self.probe_model, observations, self._held)
        predicted = [
            (value, knobs)
            for knobs in self.candidates
            if may_measure(knobs) and (value := ratios.predict(knobs)) is not None
        ]
        # Until a measured configuration corrects the probe (the baseline is one, unless the space lacks its
        # batch size), its predictions are as timed, perhaps on a machine busy then: the best of them is measured.
        corrected = bool(ratios.ratios)
        worth = [
            (value, knobs)
            for value, knobs in predicted
            if best is None or not corrected or _worth_measuring(knobs, value, best)
        ]
        # A cheap untimed knob's first twin tells its effect on every configuration, a doubtful twin's (a compute
        # value the probe read faster within its noise) whether the noise hid a gain: each goes before
        # configurations only predicted within noise below the best, which rarely turn out faster, and which could
        # spend study.n_trials before the checks of a converged search.
        ahead = worth if best is None or not corrected else [pair for pair in worth if pair[0] > best.throughput]
        if best is not None and not ahead:
            unknown = (
                knobs
                for knobs in self._twins(best, ratios)
                if not costly(knobs) and ratios.untimed_factor(knobs) is None and may_measure(knobs)
            )
            if (first := next(unknown, None)) is not None:
                return Proposal(first, None)
            doubtful = (
                twin
                for twin in self._doubtful_twins(best)
                if may_measure(twin) and not _value_measured(twin, best.knobs, observations)
            )
            if (first := next(doubtful, None)) is not None:
                return Proposal(first, ratios.predict(first))
        value, knobs = max(worth, key=lambda pair: pair[0], default=(0.0, None))
        if knobs is not None:
            return Proposal(knobs, value)
        checks = (
            [
                *self._batch_neighbours(best),
                *(knobs for rival in _rivals(best, observations) for knobs in self._batch_neighbours(rival)),
                *self._doubtful_twins(best),
                *self._twins(best, ratios),
            ]
            if best is not None
            else []
        )
        check = next((knobs for knobs in checks if may_measure(knobs)), None)
        return Proposal(check, ratios.predict(check)) if check is not None else None

    @cached_property
    def _held(self) -> dict[str, Any]:
        """The knobs the space holds at one value, with it (the probe's anchor may have another: no workers, no
        compile); worker options aside, which follow the workers."""
        return {
            name: values[0]
            for name, values in self.space.candidates.items()
            if len(values) == 1 and name not in WORKER_OPTIONS
        }

    @cached_property
    def candidates(self) -> list[dict[str, Any]]:
        """Every configuration worth predicting, once each: loader and compute knobs varied (a compute knob's value
        only where the probe told it apart from the anchor's, ``ProbeModel.told_apart``), every untimed value, worker
        options at their preferred values; none whose compute threads oversubscribe the cores where the space holds
        the same with fewer threads (``_fewer_threads``): that one instead, unless its thread count is a candidate
        value of its own (it is then among the configurations already)."""
        anchor = {**anchor_knobs(self.space, self.baseline), **self._held}
        values_of = {
            name: [
                value
                for value in values
                if name not in COMPUTE_KNOBS or value == anchor[name] or self.probe_model.told_apart(name, value)
            ]
            for name, values in self.space.candidates.items()
        }
        varied = [name for name in (*LOADER_KNOBS, *COMPUTE_KNOBS, *UNTIMED_KNOBS) if len(values_of[name]) > 1]
        found: dict[str, dict[str, Any]] = {}
        for values in itertools.product(*(values_of[name] for name in varied)):
            knobs = {**anchor, **dict(zip(varied, values, strict=True))}
            if knobs["num_workers"] > 0:
                knobs.update({name: worker_option(self.space, name) for name in WORKER_OPTIONS})
            if (fewer := self._fewer_threads(knobs)) is not None:
                if fewer["num_threads"] in values_of["num_threads"]:
                    continue  # the same with fewer threads is a candidate of its own
                # A thread count the probe did not tell apart from the anchor's is no candidate, yet as many threads
                # as the workers leave cores free cost nothing beside them: this form stands for the oversubscribed.
                knobs = fewer
            if knobs != self.baseline and self.space.contains(knobs):
                found.setdefault(config_key(knobs), knobs)
        return list(found.values())

    def _fewer_threads(self, knobs: dict[str, Any]) -> dict[str, Any] | None:
        """``knobs`` with only the compute threads its workers leave cores free, where it asks for more and the
        space holds that count; else None. The probe predicts the two alike (threads beyond the free cores gain
        nothing: the workers hold them), so only the latter is worth a trial: measuring both would spend one on a
        tie the model already settles."""
        free = self.probe_model.free_threads(knobs)
        fewer = {**knobs, "num_threads": free}
        return fewer if free is not None and self.space.contains(fewer) else None

    def _batch_neighbours(self, best: Observation) -> list[dict[str, Any]]:
        """The best configuration at the next smaller and larger batch size of the space: the knob the probe
        predicts least well (its loader timings are short), checked by measurement before the search ends. Not
        for a compiled best: each new batch size would cost a compile."""
        sizes = sorted(self.space.candidates["batch_size"])
        if costly(best.knobs) or best.knobs["batch_size"] not in sizes:
            return []
        index = sizes.index(best.knobs["batch_size"])
        near = [sizes[i] for i in (index - 1, index + 1) if 0 <= i < len(sizes)]
        neighbours = [{**best.knobs, "batch_size": size} for size in near]
        return [knobs for knobs in neighbours if self.space.contains(knobs)]

    def _doubtful_twins(self, best: Observation) -> list[dict[str, Any]]:
        """The best configuration with one compute knob at a value whose model step the probe read faster than the
        best's (by more than 3 %) but could not tell apart from its noise (``ProbeModel.told_apart``): no candidate,
        as a change that does nothing would enter every trial, yet measured once on the best, as a gain the noise
        hid would be lost."""
        anchor = self.probe_model.plan.computes[0]
        return [
            twin
            for name, value, twin in self._one_changed(best, COMPUTE_KNOBS)
            if value != anchor[name]
            and not self.probe_model.told_apart(name, value)
            and self.probe_model.faster_step(twin, best.knobs)
        ]

    def _twins(self, best: Observation, ratios: _Ratios) -> list[dict[str, Any]]:
        """The best configuration with one untimed knob changed, where that is worth a trial."""
        return [
            twin
            for name, _, twin in self._one_changed(best, UNTIMED_KNOBS)
            if not KNOBS[name].costly or self._compile_may_pay(best, ratios)
        ]

    def _one_changed(self, best: Observation, names: tuple[str, ...]) -> Iterator[tuple[str, Any, dict[str, Any]]]:
        """Each knob of ``names`` at each other value of the space, and the best configuration with that one change
        where the space holds it."""
        for name in names:
            for value in self.space.candidates[name]:
                twin = {**best.knobs, name: value}
                if value != best.knobs[name] and self.space.contains(twin):
                    yield name, value, twin

    def _compile_may_pay(self, best: Observation, ratios: _Ratios) -> bool:
        """Whether the best configuration, its model step COMPILE_UPSIDE times faster, is predicted to beat itself
        by more than one run's noise (WORTH_MEASURING): not where loading data limits it."""
        faster = ratios.predict(best.knobs, compute_scale=COMPILE_UPSIDE)
        plain = ratios.predict(best.knobs)
        return faster is not None and plain is not None and faster > plain * (1 + WORTH_MEASURING)


def _value_measured(twin: dict[str, Any], best: dict[str, Any], observations: list[Observation]) -> bool:
    """Whether a measured configuration holds the values by which ``twin`` differs from ``best``."""
    changed = {name: value for name, value in twin.items() if best[name] != value}
    return any(all(o.knobs[name] == value for name, value in changed.items()) for o in observations)


class _Ratios:
    """Measured/predicted ratios of the observations, by group, to correct predictions with; and, for the knobs the
    probe does not time, the factor by which measured twins changed their plain (anchor-valued) partner."""

    def __init__(self, probe_model: ProbeModel, observations: list[Observation], held: dict[str, Any]) -> None:
        self.probe_model = probe_model
        # An untimed knob the space holds at one value (search.compile=[default]) has no plain form to measure: the
        # probe, as timed, stands for it until trials of it correct it.
        self.anchor = {**probe_model.plan.computes[0], **{n: v for n, v in held.items() if n in UNTIMED_KNOBS}}
        self.ratios: list[tuple[dict[str, Any], float]] = []
        self.measured = {config_key(o.knobs): o.throughput for o in observations}
        self.observations = observations
        for observation in observations:
            predicted = _predict(probe_model, observation.knobs)
            if predicted:
                self.ratios.append((observation.knobs, observation.throughput / predicted))

    def predict(self, knobs: dict[str, Any], compute_scale: float = 1.0) -> float | None:
        plain = self._plain(knobs)
        factor = None if plain == knobs else self.untimed_factor(knobs)
        if factor is not None:
            # the plain form's own measurement where there is one (unless asked about a faster model step)
            measured = self.measured.get(config_key(plain)) if compute_scale == 1.0 else None
            base = measured if measured is not None else self.predict(plain, compute_scale)
            return None if base is None else base * factor
        raw = _predict(self.probe_model, knobs, compute_scale)
        ratio = self._ratio(knobs)
        return None if raw is None or ratio is None else raw * ratio

    def _plain(self, knobs: dict[str, Any]) -> dict[str, Any]:
        """``knobs`` with the untimed knobs at the values the probe ran with."""
        return {**knobs, **{name: self.anchor[name] for name in UNTIMED_KNOBS}}

    def untimed_factor(self, knobs: dict[str, Any]) -> float | None:
        """The median measured ratio twin / plain partner over the measured twins with ``knobs``' untimed values
        whose plain partner was measured too; None without such a pair. Where a compiled twin lost to its plain
        partner, every other compiled configuration is expected to lose likewise, whatever the probe predicted
        for its plain form: the measured effect of compile, not a ratio to a prediction, carries over."""
        factors = []
        for observation in self.observations:
            if any(observation.knobs[name] != knobs[name] for name in UNTIMED_KNOBS):
                continue
            partner = self.measured.get(config_key(self._plain(observation.knobs)))
            if partner:
                factors.append(observation.throughput / partner)
        return statistics.median(factors) if factors else None

    def _ratio(self, knobs: dict[str, Any]) -> float | None:
        """The median ratio of the closest group that has one: same workers count, then same worker setting
        (with or without workers), then any workers; always with the same untimed knob values. Without any,
        1 (the probe as it is) for the untimed values the probe ran with, else None (unknown)."""
        untimed = [(k, r) for k, r in self.ratios if all(k[name] == knobs[name] for name in UNTIMED_KNOBS)]
        groups = (
            [r for k, r in untimed if k["num_workers"] == knobs["num_workers"]],
            [r for k, r in untimed if (k["num_workers"] > 0) == (knobs["num_workers"] > 0)],
            [r for _, r in untimed],
        )
        probed = all(knobs[name] == self.anchor[name] for name in UNTIMED_KNOBS)
        return next((statistics.median(group) for group in groups if group), 1.0 if probed else None)


def _rivals(best: Observation, observations: list[Observation]) -> list[Observation]:
    """The fastest feasible configuration measured with each worker count other than the best's, where its run came
    within RIVAL_WINDOW of the best's: one run's noise could hide that it is the faster. Its neighbouring batch sizes
    are checked too, as the best's are: the probe predicts batch size least well, and with workers differently (each
    batch passes between processes), and a group's correction, read off one run, carries that run's noise to all."""
    others = [o for o in observations if o.feasible and o.knobs["num_workers"] != best.knobs["num_workers"]]
    fastest = {o.knobs["num_workers"]: o for o in sorted(others, key=lambda o: o.throughput)}  # the last one stays
    return [o for o in fastest.values() if o.throughput >= best.throughput * (1 - RIVAL_WINDOW)]


def _worth_measuring(knobs: dict[str, Any], predicted: float, best: Observation) -> bool:
    """Whether a configuration predicted at ``predicted`` samples/s is worth a trial against the best so far:
    within WORTH_MEASURING of it, or, where it compiles (tens of seconds before the first step), beating it by
    WORTH_MEASURING."""
    bar = 1 + WORTH_MEASURING if costly(knobs) else 1 - WORTH_MEASURING
    return predicted > best.throughput * bar


def _predict(probe_model: ProbeModel, knobs: dict[str, Any], compute_scale: float = 1.0) -> float | None:
    """The probe's prediction, or None where it timed no setting this configuration needs."""
    try:
        return probe_model.predict(knobs, compute_scale)
    except ValueError:  # a batch size or compute value the probe did not time (e.g. a baseline outside the space)
        return None


def guide_from_record(
    record: ProbeRecord | None,
    space: SearchSpace,
    baseline: dict[str, Any],
    cores: int | None,
    device: str,
    default_threads: int | None = None,
    host_cores: int | None = None,
) -> Guide | None:
    """The guide for a stored probe record (``probe_model.probe_once``), or None when the probe failed or did not
    run; ``cores``, ``default_threads`` and ``host_cores`` as ``ProbeModel`` takes them."""
    if record is None or not record.ok:
        return None
    return Guide(ProbeModel.from_record(record, cores, device, default_threads, host_cores), space, baseline)
