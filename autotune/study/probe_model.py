"""The differential probe's model: predict every configuration's throughput from the DataLoader and the
model step timed apart (``guide.py`` corrects the predictions with measured trials and chooses from them).

The prediction is a guide, not a result: rankings and the recommendation come only from full measured runs. On a CPU
without workers, loading and compute run one after the other (1/(1/L + 1/C)); with workers, or on a GPU, which
computes while the host loads the next batch, they overlap (min(L, C)), and on a CPU workers and compute also share
the cores: a sample then needs at least (loading CPU time + threads x compute time) / cores, the loading CPU time as
the probe read it for that loader setting (loading that waits for files or the network takes less CPU than its time),
and compute threads beyond the cores the workers keep busy are counted as gaining nothing (oversubscribed OpenMP
threads measured worse, never better; where the model step was not timed with the free thread count, compute is scaled
down in proportion). Workers beyond the host's cores, on a GPU too, are predicted no faster than the most within them
unless the probe read that loader leaving cores idle (``WAITING_SHARE``). Compute settings are timed one knob at a time
around the anchor (the baseline, made to fit the space) and combined as independent factors; the knobs that act on
activations (PER_BATCH_KNOBS) are timed at every batch size, as their effect changes with it (a value read
``ProbePlan.far_slower`` times slower at the anchor's batch size is not: its factor there stands for all). The anchor is
timed again before each knob's settings: each setting is read against the anchor's timings around it (the machine's
drift taken out), and a value whose effect lies within the noise those timings show (or under 3 %) is no candidate
(``ProbeModel.told_apart``; the guide measures it once, on the best, where it reads faster). torch.compile is not probed
(one compile costs more than the whole probe): the guide tries it on the best configuration found, where the model step
limits throughput. A setting that ran out of memory in the probe predicts nothing: no configuration that needs it is
predicted. One that raised predicts nothing either, and a configuration whose loader or model step is that very
setting, or of a batch size at which every model step setting raised (``ProbeModel.raised``), would raise the same in a
trial: the guide does not propose it."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import optuna

from autotune import records
from autotune.knobs import COMPUTE_KNOBS, KNOBS, PER_BATCH_KNOBS, UNTIMED_KNOBS, WORKER_OPTIONS, whole_cycles
from autotune.measure.environment import this_machine_id
from autotune.measure.measurement import SystemReport
from autotune.records import PROBE_ATTR, ProbeRecord, config_key, on_machine
from autotune.study.clock import ended_by_budget
from autotune.study.space import SearchSpace
from autotune.trial.result import Half, ProbePlan, ProbeResult, TrialResult

# Knobs the probe leaves at their default: one compile costs more than the whole probe.
_COSTLY = tuple(name for name in UNTIMED_KNOBS if KNOBS[name].costly)
# A compute knob's value that changes the model step by less than this is not worth a trial of its own.
_NEGLIGIBLE = 0.03
# How often a knob's value that changes nothing is told apart from the anchor's by the probe's noise (two-sided).
FALSE_ALARM = 0.05
# Each half of the pipeline, timed alone with the baseline's settings, bounds the whole: a probe whose loader or model
# step alone ran slower than this fraction of the measured baseline contradicts it (the machine was busy while the
# probe ran). Runs of one configuration vary by up to ~1.8x, so only a gap beyond that counts.
CONTRADICTION = 0.5
# The knobs a model step does not run with: the DataLoader's workers and their options (the probe times the step on a
# cached batch, without workers). Every other knob, untimed ones included, is part of the step's setting.
_LOADING_ONLY = ("num_workers", *WORKER_OPTIONS)
# The probe's first model step setting is timed first and again last: read slower last by more than this fraction,
# the machine slowed while the probe ran (other work came), so its factors compare settings timed at two speeds (a
# probe beside a test suite read settings up to 7x slow). Read faster last says nothing: a process's model step
# speeds up as it warms (466.8 then 861.1 samples/s on a quiet machine).
DRIFT = 0.5
# Workers beyond the host's cores are predicted faster than those within only where the probe read the loader with
# the most workers within them keeping under this share of the cores busy (the rest waiting for files or the network).
WAITING_SHARE = 0.75
# The median change between two timings of one setting, |log(a / b)|, in standard deviations of one timing's log (of
# a normal difference of two: a half-normal's median, sqrt(2) x 0.674).
_MEDIAN_CHANGE = statistics.NormalDist().inv_cdf(0.75) * math.sqrt(2)
# Below this many cores' worth a loader's reading is taken as this (a tick or two): the gain it allows stays bounded.
_MIN_BUSY_CORES = 0.05


@dataclass(frozen=True)
class ProbeModel:
    """A probe's plan and result, and what they predict. ``cores``: the CPU cores training runs on, when
    compute runs on them too (None on a GPU); ``device``: where the model step runs ("cpu" or "cuda");
    ``default_threads``: the compute threads num_threads=None starts (torch's default here, one per physical core
    or as OMP_NUM_THREADS says; None: one per core); ``host_cores``: the CPU cores the DataLoader's workers run on,
    on a GPU too (None: unknown)."""

    plan: ProbePlan
    result: ProbeResult
    cores: int | None = None
    device: str = "cpu"
    default_threads: int | None = None
    host_cores: int | None = None

    def loader(self, batch_size: int, num_workers: int) -> float:
        index = self.plan.loaders.index({"batch_size": batch_size, "num_workers": num_workers})
        return _timed(self.result.loader_throughputs[index])

    def compute(self, knobs: dict[str, Any]) -> float:
        """Model-step samples/s of ``knobs``: the anchor's at this batch size (``_base_at``), times each compute
        knob's measured factor (``_factor``). Raises ValueError where a setting it needs was not timed or ran out of
        memory."""
        at_batch = {**self.plan.computes[0], "batch_size": knobs["batch_size"]}
        base = self._base_at(at_batch, knobs)
        rate = self._compute_of(base)
        for name in COMPUTE_KNOBS:
            value = self._timed_value(name, knobs[name])
            if value != base[name]:
                rate *= self._factor(name, value, at_batch)
        return rate

    def _base_at(self, at_batch: dict[str, Any], knobs: dict[str, Any]) -> dict[str, Any]:
        """Where ``knobs``' model step is predicted from: the anchor at its batch size, or, where that ran out of
        memory, a setting timed there with some of ``knobs``' own values (bf16 at a batch where fp32 ran out)."""
        if self._ran(at_batch):
            return at_batch
        own = {name: self._timed_value(name, knobs[name]) for name in COMPUTE_KNOBS}
        timed_there = [
            k
            for k in self.plan.computes
            if k["batch_size"] == knobs["batch_size"]
            and self._ran(k)
            and all(k[name] in (at_batch[name], own[name]) for name in COMPUTE_KNOBS)
        ]
        return timed_there[0] if timed_there else at_batch

    def _factor(self, name: str, value: Any, at_batch: dict[str, Any]) -> float:
        """How much setting ``name`` to ``value`` sped up the model step: timed at ``at_batch``'s batch size where
        it was, both ways (PER_BATCH_KNOBS; not where either ran out of memory there or was not timed as far slower),
        else at the anchor's."""
        changed_there = {**at_batch, name: value}
        timed_there = changed_there in self.plan.computes and self._ran(changed_there) and self._ran(at_batch)
        base = at_batch if timed_there else self.plan.computes[0]
        return self._compute_of({**base, name: value}) / self._compute_of(base)

    def _timed_value(self, name: str, value: Any) -> Any:
        """``value``; for num_threads=None (torch's default) on a CPU, its thread count where that was timed, else the
        core count (always a candidate), where None itself was not timed (a baseline with torch's default, searched
        over explicit counts)."""
        untimed_default = not any(k["num_threads"] is None for k in self.plan.computes)
        if name == "num_threads" and value is None and self.cores is not None and untimed_default:
            threads = self.default_threads
            return threads if threads is not None and self._timed_threads(threads) else self.cores
        return value

    @classmethod
    def from_record(
        cls,
        record: ProbeRecord,
        cores: int | None = None,
        device: str = "cpu",
        default_threads: int | None = None,
        host_cores: int | None = None,
    ) -> ProbeModel:
        """The model of a successful probe's record."""
        return cls(record.plan, record.result, cores, device, default_threads, host_cores)

    def predict(self, knobs: dict[str, Any], compute_scale: float = 1.0) -> float:
        """Predicted samples/s of ``knobs`` (knobs the probe does not time count as at the anchor), with the model
        step ``compute_scale`` times as fast as timed. Raises ValueError where a needed setting was not timed or ran
        out of memory."""
        loading = self._loading(knobs["batch_size"], knobs["num_workers"])
        compute = self.compute(knobs) * compute_scale
        if knobs["num_workers"] == 0 and self.device == "cpu":
            return 1 / (1 / loading + 1 / compute)
        threads = None
        if self.cores is not None:
            threads = self._threads(knobs)
            free = self.free_threads(knobs)
            if free is not None:
                # Oversubscribed cores: compute threads beyond those the workers leave free gain nothing. Where
                # that thread count was not timed, compute is taken to scale with threads: a pessimistic bound
                # (oversubscribed OpenMP threads measure worse still).
                if self._timed_threads(free):
                    compute = self.compute({**knobs, "num_threads": free}) * compute_scale
                else:
                    compute *= free / threads
                threads = free
        seconds = max(1 / loading, 1 / compute)
        if threads is not None:
            loading_cpu = self._loading_cpu_s(knobs["batch_size"], knobs["num_workers"])
            seconds = max(seconds, (loading_cpu + threads / compute) / self.cores)
        return 1 / seconds

    def _loading(self, batch_size: int, num_workers: int) -> float:
        """The loader's samples/s with ``num_workers``: as timed within the host's cores; beyond them no faster than
        the most workers timed within them where that loader kept the cores busy, and no faster than
        it would be with every core as busy where it left cores idle (loading that waits: more workers fill them).
        Two timings of a quarter second differ by more than the cores beyond can add where loading computes."""
        rate = self.loader(batch_size, num_workers)
        if self.host_cores is None or num_workers <= self.host_cores:
            return rate
        within = max((w for w in self._workers_ran(batch_size) if w <= self.host_cores), default=None)
        if within is None:
            return rate
        within_rate = self.loader(batch_size, within)
        cpu = self._loader_cpu(batch_size, within)
        busy = cpu * within_rate if cpu is not None else None
        if busy is None or busy >= WAITING_SHARE * self.host_cores:
            return min(rate, within_rate)
        return min(rate, within_rate * self.host_cores / max(busy, _MIN_BUSY_CORES))

    def _workers_ran(self, batch_size: int) -> list[int]:
        """The worker counts the probe's loader ran with at ``batch_size`` (timed: not out of memory, not raised)."""
        return [
            setting["num_workers"]
            for setting, rate in zip(self.plan.loaders, self.result.loader_throughputs, strict=True)
            if setting["batch_size"] == batch_size and rate is not None
        ]

    def free_threads(self, knobs: dict[str, Any]) -> int | None:
        """The cores ``knobs``' workers leave free for compute threads, where it asks for more threads than that
        (its cores are oversubscribed); None where they are not, or the core count is unknown."""
        if self.cores is None or knobs["num_workers"] == 0:
            return None
        free = max(1, self.cores - self._cores_loading(knobs))
        return free if self._threads(knobs) > free else None

    def _threads(self, knobs: dict[str, Any]) -> int:
        """The compute threads ``knobs`` runs (None: ``default_threads``), at most one per core."""
        return min(knobs["num_threads"] or self.default_threads or self.cores, self.cores)

    def _timed_threads(self, threads: int) -> bool:
        return any(k["num_threads"] == threads for k in self.plan.computes)

    @cached_property
    def anchor_timings(self) -> list[float] | None:
        """The anchor's timings in order: the first, one before each knob's settings, the last; None where the
        probe has fewer than three, or one of them did not run."""
        repeats = self.result.anchor_repeats
        timings = [self.result.compute_throughputs[0], *repeats, self.result.anchor_again]
        if len(timings) < 3 or len(repeats) != len(self.plan.anchor_before) or not all(timings):
            return None
        return timings

    @cached_property
    def noise(self) -> float | None:
        """One model step timing's noise while the machine holds its speed, the standard deviation of its log: from
        the median change between the anchor's successive timings (``_MEDIAN_CHANGE``), so that the machine's speed
        moving once (by a third within seconds on a shared host) is not taken for every timing's noise; a setting
        timed while it moved counts the move (``_variance``). None without three anchor timings."""
        changes = self._anchor_changes
        return None if changes is None else statistics.median(changes) / _MEDIAN_CHANGE

    @cached_property
    def largest_move(self) -> float | None:
        """The most the anchor's timing changed from one to the next, as a fraction of the slower of the two (the
        machine's speed moving, or a timing's noise); None without three anchor timings."""
        changes = self._anchor_changes
        return None if changes is None else math.exp(max(changes)) - 1

    @cached_property
    def _anchor_changes(self) -> list[float] | None:
        """|log(after / before)| of each of the anchor's successive timings; None without three."""
        anchor = self.anchor_timings
        if anchor is None:
            return None
        return [abs(math.log(after / before)) for before, after in itertools.pairwise(anchor)]

    @cached_property
    def _brackets(self) -> list[tuple[float, float]] | None:
        """For each model step setting, the anchor's timings before and after its knob's settings (for the
        anchor's own settings, its first timing and the next); None without three anchor timings."""
        anchor = self.anchor_timings
        if anchor is None:
            return None
        bounds = [0, *self.plan.anchor_before, len(self.result.compute_throughputs)]
        return [(anchor[g], anchor[g + 1]) for g in range(len(bounds) - 1) for _ in range(bounds[g], bounds[g + 1])]

    @cached_property
    def _rates(self) -> list[float | None]:
        """The model step settings' samples/s with the machine's drift taken out: each divided by the geometric mean
        of the anchor's timings before and after its knob's settings (``_brackets``), and multiplied by that of all
        of them, at which the anchor itself stands. As timed where the probe has no three anchor timings. The
        machine's speed moves by a third within seconds on a shared host: a setting timed in a fast moment would
        otherwise read as a gain."""
        raw = self.result.compute_throughputs
        brackets = self._brackets
        if brackets is None:
            return list(raw)
        overall = statistics.geometric_mean(self.anchor_timings)
        rates = [
            None if rate is None else rate * overall / math.sqrt(before * after)
            for rate, (before, after) in zip(raw, brackets, strict=True)
        ]
        return [overall, *rates[1:]]

    def _variance(self, index: int) -> float:
        """The variance of the log of compute setting ``index``'s rate (``_rates``): the anchor's, the mean of all
        its timings; another's, its own timing's, its level's (the mean of two timings) and, where the anchor's
        timings around it differ, the square of half their change: it may have been timed anywhere in that move (a
        cautious reading, as if the move's half were one standard deviation)."""
        noise = self.noise or 0.0
        brackets = self._brackets
        if brackets is None:
            return 0.0
        if index == 0:
            return noise**2 / len(self.anchor_timings)
        before, after = brackets[index]
        return 1.5 * noise**2 + (math.log(after / before) / 2) ** 2

    def told_apart(self, name: str, value: Any) -> bool:
        """Whether the probe read compute knob ``name`` at ``value`` apart from the anchor's value: its factor (the
        model step with ``value`` over the step without, at each batch size where both ran, ``_rates``), at one
        batch size or by their geometric mean, beyond what the probe's noise (``noise``) gives such a ratio at a
        FALSE_ALARM rate, and by more than 3 %; or ``value`` ran at a batch size where the anchor's value ran out of
        memory. A value told apart by noise alone would send the search to trials, and the trim to races, that
        change nothing."""
        computes = self.plan.computes
        anchor = computes[0]
        pairs = [(k, {**k, name: anchor[name]}) for k in computes if k[name] == value != anchor[name]]
        ran = [(computes.index(k), computes.index(base)) for k, base in pairs if self._ran(k) and self._ran(base)]
        if len(ran) < len([k for k, _ in pairs if self._ran(k)]):
            return True  # it ran where the anchor's value did not
        if not ran:
            return False
        logs = [math.log(self._rates[i] / self._rates[base]) for i, base in ran]
        sds = [math.sqrt(self._variance(i) + self._variance(base)) for i, base in ran]
        floor = math.log(1 + _NEGLIGIBLE)
        # Of n factors, one strays n times as often as a given one: its bound is Bonferroni's.
        one = _bound(FALSE_ALARM / len(ran))
        mean_sd = math.sqrt(sum(sd * sd for sd in sds)) / len(ran)
        return any(abs(log) > max(floor, one * sd) for log, sd in zip(logs, sds, strict=True)) or abs(
            statistics.mean(logs)
        ) > max(floor, _bound(FALSE_ALARM) * mean_sd)

    def faster_step(self, knobs: dict[str, Any], than: dict[str, Any]) -> bool:
        """Whether the probe reads ``knobs``' model step faster than ``than``'s by more than 3 % (False where it did
        not time a setting either needs)."""
        try:
            return self.compute(knobs) > self.compute(than) * (1 + _NEGLIGIBLE)
        except ValueError:
            return False

    def _loading_cpu_s(self, batch_size: int, num_workers: int) -> float:
        """CPU seconds per sample of loading with ``num_workers``: as the probe read it for that setting, else (not
        read, or not to be trusted: ``_loader_cpu``) from the loader timed with the fewest workers, as if its
        workers were busy all the time."""
        measured = self._loader_cpu(batch_size, num_workers)
        if measured is not None:
            return measured
        fewest = min(self._workers_ran(batch_size), default=num_workers)
        return max(fewest, 1) / self.loader(batch_size, fewest)

    def _loader_cpu(self, batch_size: int, num_workers: int) -> float | None:
        """The CPU seconds a sample took loading with ``num_workers``, as the probe read it; None where it did not,
        or where other processes kept the cores busy meanwhile (loading off a core may then have waited for one)."""
        others = self.result.loader_others_cores
        if not self.result.loader_cpu or others is None or others >= SystemReport.BUSY_OTHERS_CORES:
            return None
        return self.result.loader_cpu[self.plan.loaders.index({"batch_size": batch_size, "num_workers": num_workers})]

    def _cores_loading(self, knobs: dict[str, Any]) -> int:
        """The cores ``knobs``' workers keep busy: their count, or fewer where the probe read loading waiting (the
        CPU it used while its loader ran alone at full speed, rounded up)."""
        workers = knobs["num_workers"]
        cpu = self._loader_cpu(knobs["batch_size"], workers)
        if cpu is None:
            return workers
        return min(workers, math.ceil(cpu * self.loader(knobs["batch_size"], workers)))

    def _compute_of(self, knobs: dict[str, Any]) -> float:
        return _timed(self._rates[self.plan.computes.index(knobs)])

    def _ran(self, knobs: dict[str, Any]) -> bool:
        """Whether the compute setting ``knobs`` was timed, not out of memory."""
        return self.result.compute_throughputs[self.plan.computes.index(knobs)] is not None

    def raised(self, knobs: dict[str, Any]) -> str | None:
        """The error the probe raised with ``knobs``' own loader setting (its batch size and workers: a stream that
        gives each worker too few samples for a batch), or its own model step setting, where it timed that exact
        setting (every knob equal but the workers and their options, ``_LOADING_ONLY``) and it raised, or where every
        model step setting it timed at ``knobs``' batch size raised (a forward that rejects the batch, whatever else
        is set); else None. A trial of ``knobs`` would raise the same. Out of memory is not counted here:
        ``ProbeRecord.out_of_memory`` bounds every configuration needing no less memory."""
        return (
            self._loader_raised.get(_loader_key(knobs))
            or self._raised.get(_step_key(knobs))
            or self._raised_at_batch.get(knobs["batch_size"])
        )

    @cached_property
    def _loader_raised(self) -> dict[tuple[int, int], str]:
        """The loader settings that raised, by ``_loader_key``: their error."""
        return {
            _loader_key(self.plan.loaders[entry.index]): entry.message
            for entry in self.result.failed
            if entry.half == "loader"
        }

    @cached_property
    def _failed(self) -> dict[int, str]:
        """The model step settings that raised, by their index in the plan: their error."""
        return {entry.index: entry.message for entry in self.result.failed if entry.half == "compute"}

    @cached_property
    def _raised(self) -> dict[str, str]:
        """The model step settings that raised, by ``_step_key``: their error."""
        return {_step_key(self.plan.computes[index]): message for index, message in self._failed.items()}

    @cached_property
    def _raised_at_batch(self) -> dict[int, str]:
        """The batch sizes at which every model step setting the probe timed raised: the first one's error."""
        at: dict[int, list[int]] = {}
        for index, knobs in enumerate(self.plan.computes):
            at.setdefault(knobs["batch_size"], []).append(index)
        failed = self._failed
        return {batch: failed[found[0]] for batch, found in at.items() if all(index in failed for index in found)}


def _bound(false_alarm: float) -> float:
    """How many standard deviations a normal reading strays beyond, either way, at the rate ``false_alarm``."""
    return statistics.NormalDist().inv_cdf(1 - false_alarm / 2)


def _loader_key(knobs: dict[str, Any]) -> tuple[int, int]:
    """The identity of ``knobs``' loader setting as the probe times it (``ProbePlan.loaders``)."""
    return knobs["batch_size"], knobs["num_workers"]


def _step_key(knobs: dict[str, Any]) -> str:
    """The identity of ``knobs``' model step (``_step_knobs``)."""
    return config_key(_step_knobs(knobs))


def _step_knobs(knobs: dict[str, Any]) -> dict[str, Any]:
    """The knobs ``knobs``' model step runs with: every knob but those only loading runs with (``_LOADING_ONLY``)."""
    return {name: value for name, value in knobs.items() if name not in _LOADING_ONLY}


def _timed(throughput: float | None) -> float:
    """A probe setting's throughput; ValueError where it ran out of memory or raised (None), so nothing is predicted
    from it."""
    if throughput is None:
        raise ValueError("this setting did not run in the probe")
    return throughput


def probe_plan(space: SearchSpace, baseline: dict[str, Any], **timing: Any) -> ProbePlan:
    """Every loader setting (batch size x workers), the anchor's first (``anchor_loader``: the probe stops where it
    fails, ``trial/probe.py``), the anchor's model step at every batch size, and the anchor with one compute knob
    changed, for every other value of each compute knob: at every batch size for PER_BATCH_KNOBS, at the anchor's for
    the others; each timed as ``timing`` says (ProbePlan's defaults)."""
    candidates = space.candidates
    own = anchor_loader(space, baseline)
    every = [{"batch_size": b, "num_workers": w} for b in candidates["batch_size"] for w in candidates["num_workers"]]
    loaders = [own, *(setting for setting in every if setting != own)]
    anchor = anchor_knobs(space, baseline)
    others = [{**anchor, "batch_size": b} for b in candidates["batch_size"] if b != anchor["batch_size"]]
    computes, anchor_before = [anchor, *others], []
    for name in COMPUTE_KNOBS:
        bases = [anchor, *others] if name in PER_BATCH_KNOBS else [anchor]
        group = [{**base, name: value} for base in bases for value in candidates[name] if value != anchor[name]]
        anchor_before += [len(computes)] if group else []
        computes += group
    return ProbePlan(loaders, computes, anchor_before=anchor_before, **timing)


def expected_probe_s(
    plan: ProbePlan, process_s: float, sample_compute_s: float, effective_batch_size: int | None = None
) -> float:
    """What the probe of ``plan`` is expected to take, for study.budget_s: a process of the pipeline (``process_s``:
    its start and build, as the baseline's took); every loader setting timed for ``plan.seconds`` and as long again for
    its workers' start; every model-step setting (the first again: once untimed, before each index of
    ``plan.anchor_before``, and at the end to see that the machine's speed held) for ``plan.min_steps`` steps or
    ``plan.seconds``, whichever is longer, after ``plan.warmup_steps``, and ``plan.seconds`` to copy the model, each
    step taking the baseline's compute time a sample (``sample_compute_s``) times its batch; with micro-batches
    accumulated up to ``effective_batch_size``, each count of steps rounded up to whole optimizer steps, as the probe
    times them (``step_throughput``)."""

    def compute_s(knobs: dict[str, Any]) -> float:
        step_s = sample_compute_s * knobs["batch_size"]
        cycle = (effective_batch_size or knobs["batch_size"]) // knobs["batch_size"]
        timed = max(plan.seconds, whole_cycles(plan.min_steps, cycle) * step_s)
        return timed + whole_cycles(plan.warmup_steps, cycle) * step_s + plan.seconds

    anchor = plan.computes[0]
    return (
        process_s
        + 2 * plan.seconds * len(plan.loaders)
        + sum(map(compute_s, [anchor, *plan.computes, *[anchor] * len(plan.anchor_before), anchor]))
    )


def anchor_loader(space: SearchSpace, baseline: dict[str, Any]) -> dict[str, Any]:
    """The DataLoader setting the probe predicts every configuration's loading from: the anchor's batch size, and
    the baseline's workers where the space has them, else its first count."""
    batch_size = anchor_knobs(space, baseline)["batch_size"]
    return {"batch_size": batch_size, "num_workers": baseline_or_first(space, baseline, "num_workers")}


def anchor_knobs(space: SearchSpace, baseline: dict[str, Any]) -> dict[str, Any]:
    """The baseline, each knob moved to the space's first candidate where the space lacks its value; without
    workers (the model step is timed on a cached batch) and with the costly knobs off, as the probe leaves them."""
    anchor = {
        name: baseline[name] if baseline[name] in values else values[0] for name, values in space.candidates.items()
    }
    left_out = {name: KNOBS[name].baseline_default for name in _COSTLY}
    return {**anchor, "num_workers": 0, **dict.fromkeys(WORKER_OPTIONS), **left_out}


def probe_once(
    study: optuna.Study,
    space: SearchSpace,
    baseline: dict[str, Any],
    run_probe: Callable[[ProbePlan], TrialResult],
    baseline_sps: float,
    machine: str | None = None,
    affords_again: Callable[[], bool] = lambda: True,
) -> ProbeRecord:
    """Run the probe once per study and machine (None: this one) and store what it found (reused on resume, and by
    other tuners of the study on a machine alike: the first stored is the one used). Returns the stored record;
    a probe that fails, whose timings contradict the baseline's measured ``baseline_sps`` (CONTRADICTION), or that
    ran out of memory or raised at its anchor (the baseline's own settings, or as near as the space allows:
    ``anchor_knobs``, ``anchor_loader``), is recorded as failed and the search goes on without it. One whose timings
    drifted (DRIFT) runs once more where ``affords_again()`` (study.budget_s); drifted again, it is recorded as
    failed; with no time to, as failed for now (``ProbeRecord.retry``): a later run probes anew. So is one whose
    process what study.budget_s had left ended (``clock.ended_by_budget``), how long it ran kept
    (``ProbeRecord.capped_s``): this run searches without it, and only a later run that can give it more probes anew
    (``capped_probe_s``, ``RunClock.affords``), each run of it given more than the last, so none loops."""
    attr = on_machine(PROBE_ATTR, machine or this_machine_id())
    if (stored := stored_probe(study, machine)) is not None:
        return stored
    plan = probe_plan(space, baseline)
    result = run_probe(plan)
    again = False
    ran_s = result.wall_s  # the last run's own, which the budget's cap may have ended
    if (drift := _drift(result)) and affords_again():  # once more: a burst of other work is often over
        first_s, again = result.wall_s, True
        result = run_probe(plan)
        ran_s = result.wall_s
        result, drift = replace(result, wall_s=first_s + result.wall_s), _drift(result)
    if not result.ok or result.probe is None:  # ended by the budget: for want of time, not by what it read
        # How long its capped run ran, all the budget had left as it started; another tuner's since, where longer.
        capped = [ran_s, capped_probe_s(study, machine) or 0.0] if ended_by_budget(result) else []
        record = ProbeRecord(
            result.wall_s, failure=str(result.failure), retry=bool(capped), capped_s=max(capped, default=None)
        )
    else:
        probe_model = ProbeModel(plan, result.probe)
        anchor = anchor_knobs(space, baseline)
        workers = plan.loaders[0]["num_workers"]  # the anchor's (``probe_plan``): the baseline's, if the probe timed it
        try:
            loading, compute = probe_model.loader(anchor["batch_size"], workers), probe_model.compute(anchor)
        except ValueError:  # the anchor did not run: every prediction scales its timings
            reason = _anchor_failure(plan, result.probe, baseline)
            record = ProbeRecord(result.wall_s, plan, result.probe, failure=reason)
        else:
            record = ProbeRecord(
                result.wall_s,
                plan,
                result.probe,
                loading,
                compute,
                timing_noise=probe_model.noise,
                timing_move=probe_model.largest_move,
            )
            record = _contradicted(record, _timed_as_baseline(anchor, workers, baseline), baseline_sps)
        if drift:
            reason = (
                f"its timings drifted {'twice' if again else 'and study.budget_s left no time to probe again'}: its "
                f"first model step setting read {drift[0]:.1f} then {drift[1]:.1f} samples/s; the machine slowed "
                "while it ran"
            )
            record = ProbeRecord(result.wall_s, plan, result.probe, failure=reason, retry=not again)
    if (stored := stored_probe(study, machine)) is not None:
        return stored
    study.set_user_attr(attr, record.to_dict())
    return record


def stored_probe(study: optuna.Study, machine: str | None = None) -> ProbeRecord | None:
    """The probe ``study`` holds for ``machine`` (None: this one), but one to run again (``ProbeRecord.retry``)."""
    record = _probe_record(study, machine)
    return None if record is None or record.retry else record


def capped_probe_s(study: optuna.Study, machine: str | None = None) -> float | None:
    """How long the probe ``study`` holds for ``machine`` (None: this one) ran before study.budget_s's cap ended it
    (``ProbeRecord.capped_s``): a run probes anew only where it can give it more (``RunClock.affords``). None: it was
    not ended so, or none is stored."""
    record = _probe_record(study, machine)
    return record.capped_s if record is not None else None


def _probe_record(study: optuna.Study, machine: str | None) -> ProbeRecord | None:
    return records.probe_record(study.user_attrs, machine or this_machine_id())


def _drift(result: TrialResult) -> tuple[float, float] | None:
    """The probe's first model step setting as timed first and again last, where it read slower last beyond DRIFT."""
    probe = result.probe if result.ok else None
    first, again = (probe.compute_throughputs[0], probe.anchor_again) if probe else (None, None)
    if first is None or again is None or first / again - 1 <= DRIFT:
        return None
    return first, again


def _anchor_failure(plan: ProbePlan, result: ProbeResult, baseline: dict[str, Any]) -> str:
    """Why the probe failed where its anchor did not run: what its DataLoader (the plan's first, ``anchor_loader``)
    or its first model step setting raised, or that it ran out of memory, and at which settings: the baseline's own,
    or, where the anchor moved them, those it ran at and why (``_moved_words``): the user looks at those, not the
    baseline's."""
    halves = {"loader": plan.loaders[0], "compute": _step_knobs(plan.computes[0])}
    failed, half = _first_failure(result, {"loader": 0, "compute": 0})
    setting = halves[half]
    moved = {name: (baseline[name], value) for name, value in setting.items() if value != baseline[name]}
    if not moved:
        return f"it {failed} at the baseline's own settings, from which it predicts every configuration"
    named = {"batch_size": setting["batch_size"], **{name: after for name, (_, after) in moved.items()}}
    at = ", ".join(f"{name}={value}" for name, value in named.items())
    what = "DataLoader" if half == "loader" else "model step"
    return (
        f"it {failed} in its {what} at {at}, the probe's anchor, from which it predicts every configuration: "
        f"{_moved_words(moved)}"
    )


def _first_failure(result: ProbeResult, own: dict[Half, int]) -> tuple[str, Half]:
    """How the first of the settings ``own`` names (each half's index) to fail in ``result`` failed, and its half: in
    the order the probe runs them (its DataLoader first), the error it raised, else that it ran out of memory."""
    entries = [(f"raised {entry.message}", entry) for entry in result.failed]
    entries += [("ran out of memory", entry) for entry in result.out_of_memory]
    failed = [(words, entry.half) for words, entry in entries if own[entry.half] == entry.index]
    return min(failed, key=lambda found: found[1] != "loader")


def _moved_words(moved: dict[str, tuple[Any, Any]]) -> str:
    """Why the probe's anchor runs ``moved`` (name: the baseline's value, the anchor's) away from the baseline."""
    return "; ".join(
        f"the probe runs {name}={after}: {name} costs more than the whole probe"
        if name in _COSTLY
        else f"the baseline's {name}={before} is not in search.{name}"
        for name, (before, after) in moved.items()
    )


def _timed_as_baseline(anchor: dict[str, Any], workers: Any, baseline: dict[str, Any]) -> list[str]:
    """The halves the probe timed with the baseline's own settings (the anchor moves a knob whose baseline value
    the space lacks, such as torch's default thread count, and leaves compile out): only those bound it."""
    same = [name for name in anchor if anchor[name] == baseline[name]]
    halves = []
    if "batch_size" in same and workers == baseline["num_workers"]:
        halves.append("DataLoader")
    if set(same) >= {"batch_size", *_COSTLY, *COMPUTE_KNOBS}:
        halves.append("model step")
    return halves


def _contradicted(record: ProbeRecord, halves: list[str], baseline_sps: float) -> ProbeRecord:
    """``record``, or a failed one in its place if a half timed as the baseline ran far slower than the whole."""
    alone = {"DataLoader": record.baseline_loader_sps, "model step": record.baseline_compute_sps}
    for part in halves:
        if alone[part] < CONTRADICTION * baseline_sps:
            reason = (
                f"its timings contradict the baseline's: the {part} alone gave {alone[part]:.1f} samples/s, the "
                f"whole pipeline {baseline_sps:.1f}; something else was likely using the machine while it ran"
            )
            return ProbeRecord(record.wall_s, record.plan, record.result, failure=reason)
    return record


def baseline_or_first(space: SearchSpace, baseline: dict[str, Any], name: str) -> Any:
    values = space.candidates[name]
    return baseline[name] if baseline[name] in values else values[0]


def worker_option(space: SearchSpace, name: str) -> Any:
    """The preferred value of a worker option (PyTorch's default prefetching, persistent workers) where the
    space has it, else its first candidate."""
    values = space.candidates[name]
    return WORKER_OPTIONS[name] if WORKER_OPTIONS[name] in values else values[0]
