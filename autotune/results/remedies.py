"""What to change, ranked by what the measurements say it can bring: a knob where a knob fixes the bottleneck
(and whether the tuner tried it), the user's own code where none does.

Each expected effect is an upper bound from the profiled step's stages: a step of ``loop_s`` seconds that waits
``wait_s`` for data does the rest in ``loop_s - wait_s``; loading a batch takes ``loading_s`` in one process, so
with ``n`` workers loading beside training a step takes the longer of the two, and without workers their sum. Where
workers and training saturate the cores, a step takes as long as their work together, so loading that costs less
shortens it in proportion, down to training's work alone spread over the cores its compute threads can use.
Workers that start again each epoch make the step that begins one wait longer than the rest (``_restarts``: the
profile marks those steps): those waits are neither loading nor passing batches between processes, are taken apart
from both, and count once an epoch, as a long run pays them, not as often as the timed steps happened to hold them.
Keeping freed memory (``malloc``) saves at most the kernel's share of the step's working time: its page faults are
a part of that share, which holds the kernel's other work too.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import yaml

from autotune.knobs import KNOBS, SearchContext, conflict
from autotune.knobs.compile import replays_cuda_graphs
from autotune.knobs.num_workers import SPLIT_STREAM, WORKERS_A_CORE
from autotune.measure.hotspots import CallSite, HotFunction, Hotspots
from autotune.measure.profiling import ProfileResult
from autotune.results import race
from autotune.results.diagnosis import (
    DATA_BOUND,
    MEMORY_BOUND,
    OVERHEAD_BOUND,
    SATURATED_CORES,
    STEP_UNKNOWN,
    Figures,
    classified_operators,
    fault_finding,
    figures,
    gc_finding,
    is_compute_operator,
    is_convolution,
    leaks,
    saturation_finding,
    work_time,
)
from autotune.words import counted

# A function that takes 15 % of loading or more is worth changing on its own.
HOT_FUNCTION_SHARE = 0.15
# Collating 30 % of loading or more: the samples are costly to stack (Python objects, uneven shapes).
COLLATE_SHARE = 0.30
# Collating that is mostly copying tensors into the batch (``torch.stack``, as cProfile names it under its caller):
# the samples are tensors already, and their bytes are what costs.
COPY_SHARE = 0.5
_BATCH_COPIES = ("→ torch.stack", "→ torch.cat")
# Host-to-device copies taking 10 % of the step or more: pinned memory makes them asynchronous.
TRANSFER_SHARE = 0.10
# The optimizer step taking 10 % of the step or more: a foreach or fused step launches far fewer operators.
OPTIMIZER_SHARE = 0.10
# An expected effect under 2 % is within a profiling run's noise: no advice (every advice with a gain: ``advise``).
MIN_GAIN = 1.02
_MOST_HOT = 3
# Loading read busy under this share of its time is under the CPU reading's resolution (10 ms clock ticks): unknown.
_MIN_BUSY = 0.05
_MOST_SITES = 3  # call sites named for one hot function; the rest counted
# The DataLoader's own functions (its default collate stacking a batch, its fetcher): nothing to do offline or cache;
# the collate advice speaks for collating.
_DATALOADER_OWN = "torch.utils.data."
_RESIZE = re.compile(r"resize|interpolate|crop|thumbnail|rescale|scale|warp|affine|grid_sample", re.I)
# Opening and reading a file (the io module's files, os.read) is I/O, whatever its name says: not decoding. (Its
# in-memory streams, BytesIO and StringIO, are no I/O.)
_WAITS = re.compile(
    r"(?:^|\.)(?:sleep|select|poll|epoll|recv\w*|wait|acquire)\b|socket"
    r"|(?:^|→ )(?:_?io\.(?:open\b|FileIO\.|Buffered\w+\.|TextIOWrapper\.)|(?:os|posix|nt)\.p?read)",
    re.I,
)
_DECODE = re.compile(r"decode|imread|jpeg|png|open|load|read|decompress|frombuffer|unpickle", re.I)


@dataclass(frozen=True)
class Tried:
    """What a stored tuning study measured: its name, per knob the values its configurations ran with, the
    changes its recommendation makes to the baseline (``recommended``: knob → value; None where the study has no
    recommendation to read), per change of one knob (``twin_key``: ``KNOB=FROM->TO``) the throughput of each
    configuration it measured with TO over that of one it measured alike but for that knob, at FROM (``twins``:
    single runs), the changes its races raced with the recommendation's changes and left out, no faster beyond noise
    (``left_out``: knob → value),
    the samples/s of the DataLoader alone its probe read per batch size and worker count (``loaders``, by
    ``loader_key``), and the values its recommendation keeps from the baseline (``kept``: knob → value; the whole
    baseline where it recommends keeping it)."""

    study: str
    values: dict[str, list[Any]]
    recommended: dict[str, Any] | None = None
    twins: dict[str, list[float]] = field(default_factory=dict)
    left_out: dict[str, Any] = field(default_factory=dict)
    loaders: dict[str, float] = field(default_factory=dict)
    kept: dict[str, Any] = field(default_factory=dict)

    def says(self, knob: str, value: Any, now: Any = None) -> str:
        """Whether the study measured ``knob`` at ``value``, and recommends it, in words; and what changing it from
        ``now`` to ``value`` read where the study measured both alike."""
        seen = self.values.get(knob, [])
        if self.recommended is not None and knob in self.recommended and self.recommended[knob] == value:
            return f"the tuner recommends {knob}={value} (study '{self.study}')"
        if knob in self.kept and self.kept[knob] == value:
            return (
                f"the tuner's recommendation keeps {knob}={value} (study '{self.study}'){self._twins(knob, now, value)}"
            )
        if self.left_out_of_recommendation(knob, value):
            return (
                f"the tuner raced {knob}={value} with its recommendation's changes and left it out, no faster beyond "
                f"noise (study '{self.study}')"
            )
        if value in seen:
            unused = " and did not recommend it" if self.recommended is not None else ""
            return f"the tuner measured {knob}={value}{unused} (study '{self.study}'){self._twins(knob, now, value)}"
        listed = ", ".join(map(str, seen)) or "no value"
        return f"not tried by the tuner: study '{self.study}' measured {knob} at {listed}"

    def _twins(self, knob: str, now: Any, value: Any) -> str:
        measured = self.measured(knob, now, value)
        return f": {measured}" if measured else ""

    def measured(self, knob: str, now: Any, value: Any) -> str:
        """What the study read of changing ``knob`` from ``now`` to ``value``, alike but for it (``twins``), in words
        ("1.00x the same with num_workers=0 (one pair of single runs)"); "" where it measured no such pair."""
        ratios = self.twins.get(twin_key(knob, now, value), [])
        if not ratios:
            return ""
        pairs = "one pair" if len(ratios) == 1 else f"median of {len(ratios)} pairs"
        return f"{statistics.median(ratios):.2f}x the same with {knob}={now} ({pairs} of single runs)"

    def no_gain(self, knob: str, now: Any, value: Any) -> bool:
        """Whether the study measured changing ``knob`` from ``now`` to ``value`` gaining less than the races ask of a
        change (``race.MIN_GAIN``), by the median of two pairs or more measured alike but for it (``twins``), as
        ``measured`` prints it; by one pair, only where it read slower by as much or more: single runs vary by 6 to
        20 % (docs/profile.md), so one pair tells neither a small gain nor a small loss from none."""
        ratios = self.twins.get(twin_key(knob, now, value), [])
        if not ratios:
            return False
        median = round(statistics.median(ratios), 2)
        return median < 1 + race.MIN_GAIN if len(ratios) > 1 else median <= 1 - race.MIN_GAIN

    def left_out_of_recommendation(self, knob: str, value: Any) -> bool:
        """Whether the study's races raced setting ``knob`` to ``value`` with its recommendation's changes and left it
        out."""
        return knob in self.left_out and self.left_out[knob] == value

    def settled(self, knob: str, knobs: dict[str, Any], value: Any) -> bool:
        """Whether the study's races already chose, for a configuration of ``knobs``, against setting ``knob`` to
        ``value`` (no advice to set it is then given): ``knobs`` make the recommendation's change of ``knob`` and
        the study measured ``value`` too (the tuner chose among the values it measured; a value it never measured,
        such as a batch beyond its largest, is advised), or ``knobs`` make every change of the recommendation and
        its races left ``value`` out (``left_out``)."""
        if self.recommended is None:
            return False
        runs_recommendation = all(knobs.get(name) == after for name, after in self.recommended.items())
        if runs_recommendation and self.left_out_of_recommendation(knob, value):
            return True
        return (
            knob in self.recommended
            and knobs.get(knob) == self.recommended[knob]
            and value in self.values.get(knob, [])
        )


def loader_key(batch_size: int, num_workers: int) -> str:
    """``Tried.loaders``' key of the DataLoader at ``batch_size`` with ``num_workers`` workers."""
    return f"batch_size={batch_size} num_workers={num_workers}"


def twin_key(knob: str, before: Any, after: Any) -> str:
    """``Tried.twins``' key of ``knob`` changed from ``before`` to ``after``."""
    return f"{knob}={before}->{after}"


@dataclass(frozen=True)
class Advice:
    """One thing to change: ``action``, the measurement behind it (``why``), its expected ``effect`` and, where
    the measurements give one, the speedup it can bring at most (``gain``, the ranking's key); the ``knob`` that
    does it (and whether the tuner ``tried`` it), or the user's code ``location`` to change. ``measured_no_gain``: the
    stored study measured the change, alike but for its knob, gaining less than a change must (``Tried.no_gain``):
    it is ranked last, and is never the advice to follow next (``first_to_follow``)."""

    action: str
    why: str
    effect: str
    gain: float | None = None
    knob: str | None = None
    tried: str | None = None
    location: str | None = None
    measured_no_gain: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def advise(
    result: ProfileResult,
    verdict: str,
    knobs: dict[str, Any],
    cpu_count: int,
    tried: Tried | None,
    sixteen_bit: bool = True,
    glibc: bool = True,
    effective_batch_size: int | None = None,
    channels_last_refused: str | None = None,
) -> list[Advice]:
    """The advice for ``result`` (profiled with ``knobs`` on a machine of ``cpu_count`` cores, with 16-bit units or
    not: ``sixteen_bit``, on glibc or not: ``glibc``; gradients accumulated over micro-batches up to
    ``effective_batch_size``, None: none; a model the inspection found cannot go channels-last:
    ``channels_last_refused``, why, None: it can), ranked: a leak first, then by expected gain, those without an
    estimate next, those the study measured gaining less than a change must (``Tried.no_gain``) last; any whose
    expected gain is under ``MIN_GAIN`` left out. ``tried`` is
    the stored study of the pipeline (None where there is none: the advice then says nothing of it); a knob whose
    recommended value ``knobs`` already run gets no advice to set another value the study measured
    (``Tried.settled``)."""
    restarts = _restarts(result, knobs)
    found = _long_run(figures(result), restarts)
    ctx = _context(result, knobs, cpu_count, sixteen_bit, channels_last_refused)
    advice: list[Advice] = [_leak_advice(str(leak)) for leak in leaks(result)]
    ranked: list[Advice] = []
    if verdict == DATA_BOUND:
        ranked += _workers(result, found, knobs, cpu_count, tried, restarts)
        workers = knobs["num_workers"]
        ranked += _cheaper_loading(result, found, lambda saved: _loop_with_loading(found, saved, workers, restarts))
    elif saturation_finding(result, cpu_count):  # loading takes the cores the model step needs
        ranked += _cheaper_loading(result, found, lambda saved: _saturated_step(result, found, saved, cpu_count))
    if verdict == OVERHEAD_BOUND:
        ranked += _overhead(result, found, knobs, ctx, effective_batch_size)
    elif verdict not in (DATA_BOUND, STEP_UNKNOWN):  # which limits the model step unknown: no guess
        ranked += _arithmetic(result, found, knobs, ctx, verdict, tried)
    ranked += _persistent(result, found, restarts) + _transfer(result, found, knobs) + _garbage(result, found)
    ranked += _allocator(result, found, knobs) if glibc else []
    unsettled = (
        a
        for a in ranked
        if (a.gain is None or a.gain >= MIN_GAIN)
        and (a.knob is None or tried is None or not tried.settled(a.knob, knobs, _suggested(a)))
    )
    told = [_with_tried(a, tried, knobs) for a in unsettled]
    # Advice the study measured, alike but for its knob, gaining less than a change must comes last: the estimate
    # reads one profile, the study measured the change itself.
    return advice + sorted(told, key=lambda a: (a.measured_no_gain, -(a.gain or 0.0)))  # a leak's has no knob


def _with_tried(advice: Advice, tried: Tried | None, knobs: dict[str, Any]) -> Advice:
    """``advice`` with what the study ``tried`` says of its change, and whether it measured it gaining less than a
    change must (``Tried.no_gain``): its effect then says that its "up to" is a bound the measurement did not bear
    out."""
    if advice.knob is None or tried is None:
        return advice
    value, now = _suggested(advice), knobs.get(advice.knob)
    said, no_gain = tried.says(advice.knob, value, now), tried.no_gain(advice.knob, now, value)
    effect = advice.effect
    if no_gain and advice.gain is not None:
        effect += (
            f"; but a bound from this profile: measured, the change read {tried.measured(advice.knob, now, value)}, "
            f"under the {race.MIN_GAIN:.0%} a change must gain"
        )
    return Advice(**{**asdict(advice), "effect": effect, "tried": said, "measured_no_gain": no_gain})


def first_to_follow(advice: list[Advice]) -> Advice | None:
    """The advice to follow next of ``advice`` (ranked, as ``advise`` gives it): the first the study did not measure
    gaining less than a change must (``Advice.measured_no_gain``); None where there is none."""
    return next((a for a in advice if not a.measured_no_gain), None)


def _suggested(advice: Advice) -> Any:
    """The value ``advice.action`` sets its knob to, as the knob reads it ("set num_workers=2" → 2,
    "set channels_last=True" → True)."""
    text = re.search(rf"{advice.knob}=(\S+)", advice.action)
    value = text.group(1).rstrip(".,;:") if text else None
    return KNOBS[advice.knob].parse(yaml.safe_load(value)) if value is not None else None


def _loop_with_loading(found: Figures, saved_s: float, workers: int, restarts: _Restarts) -> float:
    """The step if loading a batch took ``saved_s`` less in one process, with ``workers`` workers (0: in the loop).
    With workers, what the loop waits beyond their loading (passing batches between processes) stays, and so do the
    waits of workers starting again (``restarts``), each shorter by the loading saved."""
    rest = found.loop_s - found.wait_s
    if workers == 0:
        return rest + max(0.0, found.wait_s - saved_s)
    loading = max(rest, (found.loading_s - saved_s) / workers)
    return loading + _handoff(found, workers, restarts) + restarts.per_step_s(saved_s)


def _handoff(found: Figures, workers: int, restarts: _Restarts) -> float:
    """What a loop with ``workers`` workers waits beyond their loading, but for the waits of workers starting again
    (``restarts``): passing batches between processes."""
    if not workers:
        return 0.0
    steady = found.loop_s - restarts.per_step_s()
    return max(0.0, steady - max(found.loop_s - found.wait_s, found.loading_s / workers))


@dataclass(frozen=True)
class _Restarts:
    """The waits for data of the timed steps that began an epoch where workers start again at each (``waits``:
    ``_restarts``), among ``steps`` timed steps; epochs of ``epoch`` steps (None: unknown, ``_epoch``)."""

    waits: list[float]
    steps: int
    epoch: int | None = None

    def per_step_s(self, saved_s: float = 0.0) -> float:
        """Those waits a step of a long run, had loading a batch cost ``saved_s`` less (each waits for its batch's
        loading too): one an epoch where its length is known; else as often as the timed steps held them."""
        lost = [max(0.0, wait - saved_s) for wait in self.waits]
        if lost and self.epoch:
            return statistics.fmean(lost) / self.epoch
        return sum(lost) / max(self.steps, 1)

    def in_window_s(self) -> float:
        """Those waits a step of the timed steps, as their mean step holds them."""
        return sum(self.waits) / max(self.steps, 1)


def _restarts(result: ProfileResult, knobs: dict[str, Any]) -> _Restarts:
    """The waits of the timed steps that began an epoch (``StageTiming.epoch_starts``) of a DataLoader whose workers
    start again there (``num_workers`` > 0, ``persistent_workers`` not set): nothing was loaded ahead of such a batch;
    epochs as long as ``_epoch`` says. A long wait at another step is a steady wait that varies (a stream opening its
    next file), however regular; a profile stored before the epochs' starts were recorded has none known."""
    stages = result.stages
    restarting = stages.num_workers > 0 and not knobs.get("persistent_workers")
    starts = (stages.epoch_starts or []) if restarting else []
    return _Restarts([stages.wait_s[step] for step in starts], stages.steps, _epoch(result))


def _epoch(result: ProfileResult) -> int | None:
    """The steps of an epoch of the profiled DataLoader: as measured, the spacing of the timed steps that began one
    (``StageTiming.epoch_starts``) where two or more did; else, of a dataset with a length, its full batches (the
    loader drops the last part-batch, so that its len() is ``dataset_len // batch_size``), but for a stream every
    worker reads whole (``ProfileResult.repeats_in_workers``), whose epochs are as many times longer as it has
    workers; else unknown (None)."""
    starts = result.stages.epoch_starts or []
    if len(starts) >= 2:
        return (starts[-1] - starts[0]) // (len(starts) - 1)
    if not result.dataset_len or result.repeats_in_workers:
        return None
    return result.dataset_len // result.stages.batch_size or None


def _long_run(found: Figures, restarts: _Restarts) -> Figures:
    """``found`` as a long run reads them: the waits of workers starting again (``restarts``) once an epoch, not as
    often as the timed steps held them (a window shorter than an epoch that holds one's start would pay it once a
    window). What every advice's gain is reckoned from."""
    if not restarts.waits:
        return found
    wait = found.wait_s - restarts.in_window_s() + restarts.per_step_s()
    loop = found.loop_s - found.wait_s + wait
    return replace(found, loop_s=loop, wait_s=wait, wait_share=wait / loop)


def _persistent(result: ProfileResult, found: Figures, restarts: _Restarts) -> list[Advice]:
    """Workers kept across epochs, where they start again at each (``restarts``): an epoch's first batch then waits
    for its loading alone."""
    waits = restarts.waits
    if not waits:
        return []
    gain = found.loop_s / (found.loop_s - restarts.per_step_s(found.loading_s))
    median = statistics.median(result.stages.wait_s)
    least, most = f"{min(waits) * 1e3:.0f}", f"{max(waits) * 1e3:.0f}"
    waited = f"{least} ms" if least == most else f"{least} to {most} ms"
    often = f"once an epoch of {restarts.epoch} steps" if restarts.epoch else "as often as the timed steps held them"
    return [
        Advice(
            "set persistent_workers=True",
            f"{len(waits)} of the {restarts.steps} timed steps began an epoch and waited {waited} for data, against a "
            f"median wait of {median * 1e3:.1f} ms: workers that do not persist start again at each epoch's start",
            f"up to {gain:.2f}x if an epoch's first batch waited for its loading alone ({found.loading_s * 1e3:.1f} "
            f"ms), {often}",
            gain,
            knob="persistent_workers",
        )
    ]


def _saturated_step(result: ProfileResult, found: Figures, saved_s: float, cpu_count: int) -> float:
    """The step where workers and training saturate the ``cpu_count`` cores, had loading a batch cost ``saved_s``
    less: the cores do loading's work and training's, so it shortens in proportion to the work saved; but no shorter
    than training's work alone (its part of the cores' time) spread over the cores its compute threads can use (all
    of them in a profile without the reading), as loading that cost nothing would leave it, and which is no longer than
    training took with loading beside it (where workers take more of the cores than loading's time says, the share
    overstates training's)."""
    rest = found.loop_s - found.wait_s
    demand = found.loading_s + rest
    threads = result.cpu.threads if result.cpu is not None else cpu_count
    training_alone = found.loop_s * rest / demand * cpu_count / min(max(threads, 1), cpu_count)
    return max(found.loop_s * (demand - saved_s) / demand, min(training_alone, rest))


def _cheaper_loading(result: ProfileResult, found: Figures, step_after: Callable[[float], float]) -> list[Advice]:
    """The hot functions of loading and costly collating, each with the step it would leave if it cost nothing:
    ``step_after(seconds of loading a batch saved)``, against the step of ``found``."""
    hotspots = result.hotspots
    advice = []
    hot = [f for f in hotspots.functions if not f.name.startswith(_DATALOADER_OWN)]
    for function in [f for f in hot if hotspots.share(f) >= HOT_FUNCTION_SHARE][:_MOST_HOT]:
        share = hotspots.cost_share(function)
        gain = found.loop_s / step_after(found.loading_s * share)
        advice.append(_hot_advice(function, share, gain, result.operators.device))
    collate = hotspots.collate_share
    if collate >= COLLATE_SHARE:
        advice.append(_collate_advice(hotspots, collate, found.loop_s / step_after(found.loading_s * collate)))
    return advice


def _collate_advice(hotspots: Hotspots, collate: float, gain: float) -> Advice:
    """Costly collating: of Python objects, or (``COPY_SHARE`` of it copying tensors into the batch) of samples
    that are tensors already, whose bytes are the cost."""
    why = f"collating takes {collate:.0%} of loading (≥ {COLLATE_SHARE:.0%})"
    effect = f"up to {gain:.2f}x if collating cost nothing"
    copying = sum(f.self_s for f in hotspots.functions if f.name.endswith(_BATCH_COPIES))
    if hotspots.collate_s > 0 and copying >= COPY_SHARE * hotspots.collate_s:
        return Advice(
            "store samples smaller (at the size and dtype the model takes), or load in workers: the samples are "
            "tensors already, and collating copies their bytes into the batch",
            f"{why}, {copying / hotspots.collate_s:.0%} of it copying tensors into the batch (torch.stack)",
            effect,
            gain,
        )
    return Advice(
        "make samples cheap to collate: tensors of one shape per field, no Python lists or dicts of scalars",
        why,
        effect,
        gain,
    )


def _workers(
    result: ProfileResult,
    found: Figures,
    knobs: dict[str, Any],
    cpu_count: int,
    tried: Tried | None,
    restarts: _Restarts,
) -> list[Advice]:
    """More DataLoader workers, where loading a batch in one process takes longer than the rest of the step: as many
    as the cores hold, each busy its share of the time (``_loading_busy``: a worker waiting on I/O or asleep takes
    no core), and none where loading and the step already fill the cores (another would take a core from the
    step); none, where workers keep up and the loop still waits for their batches to be passed to it. The step it
    foresees is no shorter than loading's CPU time and training's (a core while it computes) over the cores. Either no
    faster than the DataLoader alone with those workers, as the study's probe read it (``_loader_bound``). Workers
    that start again each epoch (``restarts``) still do with more of them."""
    workers, rest = knobs["num_workers"], found.loop_s - found.wait_s
    needed = math.ceil(found.loading_s / rest - 1e-9) if rest > 0 else 1  # 4.000000000000001 workers are 4
    if workers >= needed and workers > 0:
        return _no_workers(found, workers, _loader_bound(tried, result.stages.batch_size, 0, found), restarts)
    busy = _loading_busy(result, found)
    held = cpu_count if busy >= 1 else min(max(cpu_count, math.floor(cpu_count / busy)), WORKERS_A_CORE * cpu_count)
    count = max(workers + 1, min(needed, held))
    if count > held or saturation_finding(result, cpu_count) is not None:
        return []
    # The cores must hold loading's CPU time and training's, at least a core's while it computes: a step takes no
    # less than the two over the cores, whatever the workers.
    cpu_bound = (found.loading_s * busy + rest) / cpu_count
    waits = _handoff(found, workers, restarts) + restarts.per_step_s()
    gain = found.loop_s / (max(rest, found.loading_s / count, cpu_bound) + waits)
    gain, loader = _within(gain, _loader_bound(tried, result.stages.batch_size, count, found))
    shared = _sharing(result, cpu_count)
    waiting = (
        f"; loading keeps a core busy {busy:.0%} of its time (the rest it waits), so more workers than cores"
        if count > cpu_count
        else ""
    )
    split = count > 1 and result.repeats_in_workers
    unsplit = f"; unsplit, the stream gives each of the {count} workers all its samples" if split else ""
    return [
        Advice(
            f"{SPLIT_STREAM + ', then ' if split else ''}set num_workers={count}",
            f"a batch takes {found.loading_s * 1e3:.1f} ms to load in one process and the rest of the step "
            f"{rest * 1e3:.1f} ms; {counted(needed, 'worker')} would keep up{waiting}{unsplit}",
            f"up to {gain:.2f}x: loading in {counted(count, 'worker')} beside training{loader}{shared}",
            gain,
            knob="num_workers",
        )
    ]


def _loader_bound(tried: Tried | None, batch_size: int, workers: int, found: Figures) -> tuple[float, str] | None:
    """The most a step at ``batch_size`` loading with ``workers`` workers can gain over the profiled one: its
    DataLoader alone, as the study's probe read it (a pipeline yields batches no faster than its loader, and passing
    them between processes can cost more than loading them), with that in words; None where the probe did not."""
    rate = tried.loaders.get(loader_key(batch_size, workers)) if tried is not None else None
    if rate is None:
        return None
    return found.loop_s * rate / batch_size, f" (its DataLoader alone yields {rate:,.0f} samples/s: the study's probe)"


def _within(gain: float, bound: tuple[float, str] | None) -> tuple[float, str]:
    """``gain``, or the ``bound`` where it is lower, with its words."""
    return bound if bound is not None and bound[0] < gain else (gain, "")


def _sharing(result: ProfileResult, cpu_count: int) -> str:
    """On a few cores, that workers share them with training's threads, as a clause: where the profiled process tree
    kept them busy already (``SATURATED_CORES``), the bound above holds only once training takes fewer threads (it
    takes workers as having cores of their own)."""
    if cpu_count > 4:
        return ""
    tree = result.cpu.system.process_tree_cores if result.cpu is not None else None
    if tree is None or tree < SATURATED_CORES * cpu_count:
        return f"; on {cpu_count} cores the workers and training's threads share them"
    return (
        f"; the profiled run kept {tree:.1f} of the {cpu_count} cores busy already, so the workers take them from "
        "training's threads: this holds only with fewer of those (num_threads), which the tuner measures with it"
    )


def _loading_busy(result: ProfileResult, found: Figures) -> float:
    """The share of its time loading keeps a core busy, at most 1, from the CPU the cores spent busy over the
    stage-timed steps (the process tree's and any other process's: on a busy machine loading cannot be told waiting,
    and reads as busy) less a core for the training process while it is not waiting for data; 1 for a profile
    without the reading, or one that reads it under ``_MIN_BUSY``. Training on more threads than one leaves loading
    less: the share errs high, so fewer workers."""
    if result.cpu is None or found.loading_s <= 0:
        return 1.0
    machine = result.cpu.system.busy_cores
    busy = (machine * found.loop_s - (found.loop_s - found.wait_s)) / found.loading_s
    return 1.0 if busy < _MIN_BUSY else min(1.0, busy)  # under the reading's resolution: unknown, one a core


def _no_workers(found: Figures, workers: int, bound: tuple[float, str] | None, restarts: _Restarts) -> list[Advice]:
    """Loading in the training process, where passing batches from workers, and their starting again each epoch
    (``restarts``), cost more than loading them there (no faster than ``bound``: ``_loader_bound``)."""
    rest, handoff = found.loop_s - found.wait_s, _handoff(found, workers, restarts)
    gain, loader = _within(found.loop_s / (rest + found.loading_s), bound)
    restarting = restarts.per_step_s()
    again = f", and {restarting * 1e3:.1f} ms for them to start again at an epoch's start" if restarting else ""
    return [
        Advice(
            "set num_workers=0",
            f"{counted(workers, 'worker')} load a batch in {found.loading_s * 1e3:.1f} ms, within the rest of the step "
            f"({rest * 1e3:.1f} ms), yet the loop waits {handoff * 1e3:.1f} ms a step for batches to be passed "
            f"between processes{again}",
            f"up to {gain:.2f}x: loading in the training process, {found.loading_s * 1e3:.1f} ms a batch{loader}",
            gain,
            knob="num_workers",
        )
    ]


def called_from(function: HotFunction, callers: bool = True) -> str:
    """The lines of the user's code that lead to library ``function``, the most time first, each with the function
    holding it (``callers``) and, where there are several, its share of ``function``'s self time; "" for none."""
    sites = function.call_sites or (
        [CallSite(function.call_site, function.caller or "", function.self_s)] if function.call_site else []
    )
    if len(sites) == 1:
        return f"{sites[0].site} ({sites[0].caller})" if callers else sites[0].site
    named = [
        f"{site.site} ({site.caller + ', ' if callers else ''}{site.self_s / function.self_s:.0%})"
        for site in sites[:_MOST_SITES]
    ]
    more = len(sites) - _MOST_SITES
    return ", ".join(named) + (f" and {more} more" if more > 0 else "")


def _hot_advice(function: HotFunction, share: float, gain: float, device: str) -> Advice:
    where = called_from(function, callers=False) or function.location
    called = f", called from {called_from(function)}" if function.call_site else ""
    if function.own:
        action = f"make {function.name} cheaper: vectorise its Python, or do its work once (in __init__, offline)"
    elif _WAITS.search(function.name):
        action = (
            f"loading waits in {function.name} (I/O, a sleep, a lock): more workers overlap the waiting, or cache "
            "what it waits for"
        )
    elif _RESIZE.search(function.name):
        action = "resize offline: store the samples at the size the model takes"
    elif _DECODE.search(function.name):
        action = "cache decoded samples (in memory, or on disk decoded), so each is decoded once, not every epoch"
    else:
        action = (
            f"do the work of {function.name} once, offline, or cache its result (not where its input is drawn at "
            "random: an augmentation)"
        )
    if device == "cuda" and not function.own:
        action += "; or move this transform to the GPU, on the batch after it is copied"
    return Advice(
        action,
        f"{share:.0%} of loading time is {function.name}{' and what it calls' if function.own else ''}{called}",
        f"up to {gain:.2f}x if it cost nothing",
        gain,
        location=where,
    )


def _context(
    result: ProfileResult, knobs: dict[str, Any], cpu_count: int, sixteen_bit: bool, channels_last_refused: str | None
) -> SearchContext:
    """What the knobs decide their values by, as ``result`` read it and the inspection found the model
    (``channels_last_refused``), ``knobs`` (the profiled configuration, which the advice changes) standing for the
    baseline; foreach for the optimizer's switches where the profile did not read them."""
    options = result.optimizer_options
    return SearchContext(
        device=result.operators.device,
        cpu_count=cpu_count,
        bf16_supported=sixteen_bit,
        dataset_len=result.dataset_len,
        input_ndim=result.input_ndim,
        baseline=knobs,
        optimizer_options=frozenset(["foreach"] if options is None else options),
        repeats_in_workers=result.repeats_in_workers,
        channels_last_refused=channels_last_refused,
    )


def _overhead(
    result: ProfileResult, found: Figures, knobs: dict[str, Any], ctx: SearchContext, effective_batch_size: int | None
) -> list[Advice]:
    overhead = found.step_overhead_share * (found.loop_s - found.wait_s)
    device = ctx.device
    mode = _compile_mode(knobs, ctx, effective_batch_size)
    graphs = replays_cuda_graphs(mode, device)
    # Compiling cuts work done on a core (dispatch, the forward's Python), not waiting: on a CPU, the time a step the
    # training process and its workers were on no core at all (a sleep, I/O, a lock) is out of its reach.
    removable = max(0.0, overhead - (_idle_s(result, found) if device != "cuda" else 0.0))
    gone = found.loop_s / (found.loop_s - removable)
    advice = [_larger_batch(found, knobs["batch_size"], overhead, device, effective_batch_size)]
    # Compiled, a step keeps the overhead compiling cuts (where ``mode`` replays CUDA graphs, by them: its own alone).
    compiled = knobs.get("compile") not in (None, "off") and (not graphs or knobs["compile"] == mode)
    if not compiled:
        advice.append(
            Advice(
                f"set compile={mode}",
                "torch.compile fuses small operators"
                + (" and replays the step as a CUDA graph, one launch a step" if graphs else ""),
                f"up to {gone:.2f}x if the overhead went",
                gone,
                knob="compile",
            )
        )
    return advice + _optimizer(found, knobs, ctx)


def _larger_batch(
    found: Figures, batch: int, overhead_s: float, device: str, effective_batch_size: int | None
) -> Advice:
    """A larger batch than ``batch``, for a step that pays ``overhead_s`` of per-step overhead: the rest of the whole
    step (loading, copies, the operators' work) grows with the batch and the overhead does not, so a batch ``k``
    times as large takes ``overhead_s + k (step - overhead_s)`` for ``k`` times the samples. Twice the batch; under
    search.batch_policy=fixed_effective (gradients accumulated up to ``effective_batch_size``) a micro-batch must
    divide the effective batch (``BatchSizeKnob.unavailable_reason``): the smallest that does, at twice ``batch`` or
    more (fewer accumulation steps, training unchanged); at the effective batch already, twice it is a new baseline
    batch, which that policy does not try (no knob)."""
    effective = effective_batch_size or 0
    divisors = (size for size in range(2 * batch, effective + 1) if effective % size == 0)
    larger = next(divisors, effective) if batch < effective else 2 * batch
    times = larger / batch
    gain = times * found.loop_s / (overhead_s + times * (found.loop_s - overhead_s))
    share = found.step_overhead_share
    read = _overhead_read(found, device)
    why = f"{share:.0%} of the model step is per-step overhead{read}, paid once a batch whatever its size"
    if batch < effective:
        effect = (
            f"up to {gain:.2f}x per sample at micro-batches of {larger}, {effective // larger} to the effective batch "
            f"of {effective} (fewer accumulation steps: training unchanged but for batch statistics)"
        )
        return Advice(f"set batch_size={larger}", why, effect, gain, knob="batch_size")
    effect = f"up to {gain:.2f}x per sample at twice the batch (it changes training: scale the learning rate)"
    if effective:
        action = (
            f"set pipeline.baseline.batch_size={larger}: a new baseline batch, beyond the effective batch of "
            f"{effective} that search.batch_policy=fixed_effective keeps"
        )
        return Advice(action, why, effect, gain)
    return Advice(f"set batch_size={larger}", why, effect, gain, knob="batch_size")


def _overhead_read(found: Figures, device: str) -> str:
    """How the per-step overhead was read (``Figures.step_overhead_share``), in words, on a GPU: its kernels idle, or,
    where the trace recorded none, the host's own work; nothing on a CPU."""
    if device != "cuda":
        return ""
    if found.device_busy_share is not None:
        return " (the GPU idle, waiting for the host)"
    return " (the host's own work: the trace recorded no GPU kernel)"


def _compile_mode(knobs: dict[str, Any], ctx: SearchContext, effective_batch_size: int | None) -> str:
    """The compile knob's candidate here that cuts the most per-step overhead and can run beside ``knobs``
    (``conflict``: no CUDA graphs beside gradients kept across steps or accumulated): its candidates go from least
    to most compiling (reduce-overhead's CUDA graphs last, on a GPU), and its least, default, runs beside any."""
    modes = [mode for mode in KNOBS["compile"].default_candidates(ctx) if mode != "off"]
    runs = (
        mode
        for mode in reversed(modes)
        if conflict({**knobs, "compile": mode}, effective_batch_size, ctx.device) is None
    )
    return next(runs, modes[0])


def _idle_s(result: ProfileResult, found: Figures) -> float:
    """Of a step but its wait for data, the time the process tree was on no core, at least: what its CPU time (read
    over the stage-timed steps) leaves of the step; 0 for a profile without the reading."""
    if result.cpu is None:
        return 0.0
    return max(0.0, found.loop_s * (1 - result.cpu.system.process_tree_cores) - found.wait_s)


def _optimizer(found: Figures, knobs: dict[str, Any], ctx: SearchContext) -> list[Advice]:
    """Another implementation of the optimizer step where it takes OPTIMIZER_SHARE or more of the step and runs
    PyTorch's default: foreach, else fused, the first the pipeline's optimizer takes here (``ctx.optimizer_options``)
    that is not what the default already runs (``OptimizerImplKnob.resolve``: foreach on a GPU, so fused there)."""
    share = found.optimizer_s / found.loop_s
    if share < OPTIMIZER_SHARE or knobs.get("optimizer_impl") not in (None, "default"):
        return []
    knob = KNOBS["optimizer_impl"]
    runs = knob.resolve("default", ctx)
    impl = next(
        (
            name
            for name in ("foreach", "fused")
            if knob.unavailable_reason(name, ctx) is None and knob.resolve(name, ctx) != runs
        ),
        None,
    )
    if impl is None:
        return []
    gain = found.loop_s / (found.loop_s - found.optimizer_s)
    return [
        Advice(
            f"set optimizer_impl={impl}",
            f"the optimizer step takes {share:.0%} of the step (≥ {OPTIMIZER_SHARE:.0%}), run as {runs} (PyTorch's "
            "default here)",
            f"up to {gain:.2f}x if it cost nothing",
            gain,
            knob="optimizer_impl",
        )
    ]


def _arithmetic(
    result: ProfileResult,
    found: Figures,
    knobs: dict[str, Any],
    ctx: SearchContext,
    verdict: str,
    tried: Tried | None,
) -> list[Advice]:
    rest = found.loop_s - found.wait_s
    advice = []
    if knobs.get("amp") in (None, "off") and ctx.bf16_supported:  # emulated bf16 is slower than fp32
        share = found.product_share if verdict != MEMORY_BOUND else 1 - found.compute_share  # of the operators'
        halved = share * found.operator_share * rest / 2
        what = "matrix products run in 16 bits" if verdict != MEMORY_BOUND else "tensors move half the bytes"
        advice.append(
            Advice(
                _amp_action(result, tried),
                f"{what}; on hardware with 16-bit units (GPUs, CPUs with avx512_bf16 or AMX)",
                f"up to {found.loop_s / (found.loop_s - halved):.2f}x if that time halved",
                found.loop_s / (found.loop_s - halved),
                knob="amp",
            )
        )
    convolutions = any(is_convolution(op.name) for op in result.operators.step_operators)
    # The knob says where it can run: inputs that go channels-last, a model that converts.
    if convolutions and not knobs.get("channels_last") and KNOBS["channels_last"].unavailable_reason(True, ctx) is None:
        advice.append(
            Advice(
                "set channels_last=True",
                "convolutions run faster on NHWC tensors on most hardware",
                "depends on the model and the hardware: only a measurement tells",
                knob="channels_last",
            )
        )
    if knobs.get("compile") in (None, "off"):
        advice.append(
            Advice(
                "set compile=default",
                f"torch.compile fuses elementwise operators, each a pass over memory ({_elementwise(result)})",
                "depends on the model: only a measurement tells",
                knob="compile",
            )
        )
    return advice + _optimizer(found, knobs, ctx)


def _amp_action(result: ProfileResult, tried: Tried | None) -> str:
    """The advice to compute in 16 bits, its value the one the study could try: fp16 on a GPU where it measured
    fp16 and no bf16 (the tuner leaves bf16 out on a GPU that only emulates it, ``AmpKnob.unavailable_reason``),
    else bf16, or fp16 on a GPU without it (a profile without a study cannot tell which GPU it ran on)."""
    measured = tried.values.get("amp", []) if tried is not None else []
    if result.operators.device == "cuda" and "fp16" in measured and "bf16" not in measured:
        return "set amp=fp16 (the study measured fp16, not bf16)"
    return "set amp=bf16 (fp16 on GPUs without bf16)"


def _elementwise(result: ProfileResult) -> str:
    """The step's three largest operators that are not arithmetic (``is_compute_operator``), with their shares of
    the operators' work (``work_time``, as the verdict splits it)."""
    ops = result.operators
    time_of = work_time(ops)
    classified = classified_operators(ops)
    total = sum(time_of(op) for op in classified) or 1.0
    arithmetic = [op for op in classified if is_compute_operator(op.name, ops.device)]
    others = sorted((op for op in classified if op not in arithmetic), key=time_of, reverse=True)[:3]
    return "the largest: " + ", ".join(f"{op.name} {time_of(op) / total:.0%}" for op in others)


def _transfer(result: ProfileResult, found: Figures, knobs: dict[str, Any]) -> list[Advice]:
    """Pinned memory, where the stage that copies batches to the GPU takes ``TRANSFER_SHARE`` of the step or more.
    With channels_last that stage converts the inputs' layout on the GPU too (``autotune.batches.move``), which
    pinning leaves: its share is then the copy's and the conversion's, and the gain the most were both to overlap."""
    share = found.transfer_s / found.loop_s
    if result.operators.device != "cuda" or share < TRANSFER_SHARE or knobs.get("pin_memory"):
        return []
    gain = found.loop_s / (found.loop_s - found.transfer_s)
    converting = bool(knobs.get("channels_last"))
    what = (
        "copying batches to the GPU and converting them to channels_last take"
        if converting
        else "copying batches to the GPU takes"
    )
    left = ", less what the layout conversion takes (pinning leaves it)" if converting else ""
    return [
        Advice(
            "set pin_memory=True",
            f"{what} {share:.0%} of the step (≥ {TRANSFER_SHARE:.0%})",
            f"up to {gain:.2f}x when the copies overlap the step{left}",
            gain,
            knob="pin_memory",
        )
    ]


def _garbage(result: ProfileResult, found: Figures) -> list[Advice]:
    finding = gc_finding(result)
    if finding is None:
        return []
    gain = 1 / (1 - result.gc.share)
    return [
        Advice(
            "call gc.freeze() once the dataset and model are built, or raise gc.set_threshold's first threshold",
            finding,
            f"up to {gain:.2f}x if no collection ran",
            gain,
        )
    ]


def _allocator(result: ProfileResult, found: Figures, knobs: dict[str, Any]) -> list[Advice]:
    """Keep freed memory (``malloc=keep``, glibc) where the step faults in fresh pages and the kernel's time shows
    it: the step then saves at most the kernel's share of its working time (CPU time summed over threads is not wall
    time: its share is), of which the faults are a part; the whole step without workers, as loading then runs in the
    training process too; blocks over 32 MiB are mapped fresh whatever glibc is told."""
    finding = fault_finding(result)
    if finding is None or knobs.get("malloc") == "keep":
        return []
    working = found.loop_s if result.stages.num_workers == 0 else found.loop_s - found.wait_s
    left = found.loop_s - result.faults.kernel_share * working
    gain = found.loop_s / left if left > 0 else None
    return [
        Advice(
            "set malloc=keep: glibc's allocator then keeps freed blocks up to 32 MiB for the next step (more resident "
            "memory)",
            finding,
            (f"up to {gain:.2f}x, " if gain else "") + "if the kernel's whole share of the step's working time were "
            "its page faults",
            gain,
            knob="malloc",
        )
    ]


def _leak_advice(evidence: str) -> Advice:
    return Advice(
        "find what keeps growing: a cache filled in __getitem__ (one per worker), tensors kept across steps "
        "(keep loss.item(), not the loss and its graph), lists appended to every step",
        evidence,
        "memory stops growing; left alone, a long run runs out of memory",
    )
