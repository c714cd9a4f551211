"""Advice on loading data: how many DataLoader workers, workers kept across epochs, and loading or collating made
cheaper (the user's code).

Each expected effect is an upper bound from the profiled step's stages: a step of ``loop_s`` seconds that waits
``wait_s`` for data does the rest in ``loop_s - wait_s``; loading a batch takes ``loading_s`` in one process, so
with ``n`` workers loading beside training a step takes the longer of the two, and without workers their sum. Where
workers and training saturate the cores, a step takes as long as their work together, so loading that costs less
shortens it in proportion, down to training's work alone spread over the cores its compute threads can use.
A DataLoader with workers begins each epoch with no batch loaded ahead (workers that do not persist start again),
so the step that begins one waits longer than the rest (``autotune/results/epochs.py``: the profile marks those
steps): what those waits exceed the other steps' wait by is neither loading nor passing batches between processes,
is taken apart from both, and counts once an epoch, as a long run pays it and as the verdict reads it
(``diagnosis.figures``); a changed step's epoch starts count by what they exceed its own steady wait
(``EpochStarts.step_s``).
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable
from typing import Any

from autotune.knobs.num_workers import SPLIT_STREAM, WORKERS_A_CORE
from autotune.measure.hotspots import CallSite, HotFunction, Hotspots
from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import SATURATED_CORES, Figures, saturation_finding
from autotune.results.epochs import EpochStarts
from autotune.results.remedy_model import Advice, Tried, loader_key
from autotune.words import counted

# A function that takes 15 % of loading or more is worth changing on its own.
HOT_FUNCTION_SHARE = 0.15
# Collating 30 % of loading or more: the samples are costly to stack (Python objects, uneven shapes).
COLLATE_SHARE = 0.30
# Collating that is mostly copying tensors into the batch (``torch.stack``, as cProfile names it under its caller):
# the samples are tensors already, and their bytes are what costs.
COPY_SHARE = 0.5
_BATCH_COPIES = ("→ torch.stack", "→ torch.cat")
_MOST_HOT = 3
# Loading read busy under this share of its time is under the CPU reading's resolution (10 ms clock ticks): unknown.
_MIN_BUSY = 0.05
_MOST_SITES = 3  # call sites named for one hot function; the rest counted
# The DataLoader's own functions (its default collate stacking a batch, its fetcher): nothing to do offline or cache;
# the collate advice speaks for collating.
_DATALOADER_OWN = "torch.utils.data."
# Work done once, offline or cached, is the same work every epoch: not what an augmentation draws afresh each time.
_NOT_RANDOM = "(not where its input or its parameters are drawn at random: an augmentation)"
_RESIZE = re.compile(r"resize|interpolate|crop|thumbnail|rescale|scale|warp|affine|grid_sample", re.I)
# Opening and reading a file (the io module's files, os.read) is I/O, whatever its name says: not decoding. (Its
# in-memory streams, BytesIO and StringIO, are no I/O.)
_WAITS = re.compile(
    r"(?:^|\.)(?:sleep|select|poll|epoll|recv\w*|wait|acquire)\b|socket"
    r"|(?:^|→ )(?:_?io\.(?:open\b|FileIO\.|Buffered\w+\.|TextIOWrapper\.)|(?:os|posix|nt)\.p?read)",
    re.I,
)
_DECODE = re.compile(r"decode|imread|jpeg|png|open|load|read|decompress|frombuffer|unpickle", re.I)


def loop_with_loading(found: Figures, saved_s: float, workers: int, starts: EpochStarts) -> float:
    """The step if loading a batch took ``saved_s`` less in one process, with ``workers`` workers (0: in the loop).
    With workers, what the loop waits beyond their loading (passing batches between processes) stays, and so do the
    waits at epochs' starts (``starts``), each shorter by the loading saved, beyond the steady wait left."""
    rest = found.loop_s - found.wait_s
    if workers == 0:
        return rest + max(0.0, found.wait_s - saved_s)
    steady = max(rest, (found.loading_s - saved_s) / workers) + _handoff(found, workers, starts)
    return starts.step_s(steady, rest, saved_s)


def _handoff(found: Figures, workers: int, starts: EpochStarts) -> float:
    """What a loop with ``workers`` workers waits beyond their loading, at the steps that began no epoch (their
    steady wait, ``starts.steady_s``): passing batches between processes."""
    if not workers:
        return 0.0
    late = max(0.0, found.loading_s / workers - (found.loop_s - found.wait_s))  # the wait loading itself explains
    return max(0.0, starts.steady_s - late)


def persistent_workers_advice(
    result: ProfileResult, found: Figures, starts: EpochStarts, knobs: dict[str, Any]
) -> list[Advice]:
    """Workers kept across epochs, where ``knobs`` leave them starting again at each (the waits of ``starts``):
    an epoch's first batch then waits for its loading alone."""
    waits = starts.waits
    if not waits or knobs.get("persistent_workers"):
        return []
    gain = found.loop_s / (found.loop_s - starts.kept_s(found.loading_s))
    median = statistics.median(result.stages.wait_s)
    return [
        Advice(
            "set persistent_workers=True",
            f"{len(waits)} of the {starts.steps} timed steps began an epoch and waited {starts.waited} for data, "
            f"against a median wait of {median * 1e3:.1f} ms: workers that do not persist start again at each "
            "epoch's start",
            f"up to {gain:.2f}x if an epoch's first batch waited for its loading alone ({found.loading_s * 1e3:.1f} "
            f"ms), {starts.how_often}",
            gain,
            knob="persistent_workers",
        )
    ]


def saturated_step(result: ProfileResult, found: Figures, saved_s: float, cpu_count: int) -> float:
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


def cheaper_loading_advice(result: ProfileResult, found: Figures, step_after: Callable[[float], float]) -> list[Advice]:
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


def num_workers_advice(
    result: ProfileResult,
    found: Figures,
    knobs: dict[str, Any],
    cpu_count: int,
    tried: Tried | None,
    starts: EpochStarts,
) -> list[Advice]:
    """More DataLoader workers, where loading a batch in one process takes longer than the rest of the step: as many
    as the cores hold, each busy its share of the time (``_loading_busy``: a worker waiting on I/O or asleep takes
    no core), and none where loading and the step already fill the cores (another would take a core from the
    step); none, where workers keep up and the loop still waits for their batches to be passed to it. The step it
    foresees is no shorter than loading's CPU time and training's (a core while it computes) over the cores. Either no
    faster than the DataLoader alone with those workers, as the study's probe read it (``_loader_bound``). An epoch's
    first batch (``starts``) still waits with more of them."""
    workers, rest = knobs["num_workers"], found.loop_s - found.wait_s
    needed = math.ceil(found.loading_s / rest - 1e-9) if rest > 0 else 1  # 4.000000000000001 workers are 4
    if workers >= needed and workers > 0:
        return _no_workers(found, workers, _loader_bound(tried, result.stages.batch_size, 0, found), starts)
    busy = _loading_busy(result, found)
    held = cpu_count if busy >= 1 else min(max(cpu_count, math.floor(cpu_count / busy)), WORKERS_A_CORE * cpu_count)
    count = max(workers + 1, min(needed, held))
    if count > held or saturation_finding(result, cpu_count) is not None:
        return []
    # The cores must hold loading's CPU time and training's, at least a core's while it computes: a step takes no
    # less than the two over the cores, whatever the workers.
    cpu_bound = (found.loading_s * busy + rest) / cpu_count
    steady = max(rest, found.loading_s / count, cpu_bound) + _handoff(found, workers, starts)
    gain = found.loop_s / starts.step_s(steady, rest)
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
    less: the share errs high, so fewer workers. The step and its wait are the timed steps', over which the cores were
    read (not a long run's: ``epochs.long_run``)."""
    if result.cpu is None or found.loading_s <= 0:
        return 1.0
    machine, step_s = result.cpu.system.busy_cores, result.stages.loop_s
    busy = (machine * step_s - (step_s - result.stages.mean("wait_s"))) / found.loading_s
    return 1.0 if busy < _MIN_BUSY else min(1.0, busy)  # under the reading's resolution: unknown, one a core


def _no_workers(found: Figures, workers: int, bound: tuple[float, str] | None, starts: EpochStarts) -> list[Advice]:
    """Loading in the training process, where passing batches from workers, and the waits at epochs' starts with no
    batch loaded ahead (``starts``), cost more than loading them there (no faster than ``bound``: ``_loader_bound``)."""
    rest, handoff = found.loop_s - found.wait_s, _handoff(found, workers, starts)
    gain, loader = _within(found.loop_s / (rest + found.loading_s), bound)
    at_starts = starts.per_step_s()
    again = f", and {at_starts * 1e3:.1f} ms at epochs' starts, no batch loaded ahead there" if at_starts else ""
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
        action = f"resize offline: store the samples at the size the model takes {_NOT_RANDOM}"
    elif _DECODE.search(function.name):
        action = "cache decoded samples (in memory, or on disk decoded), so each is decoded once, not every epoch"
    else:
        action = f"do the work of {function.name} once, offline, or cache its result {_NOT_RANDOM}"
    if device == "cuda" and not function.own:
        action += "; or move this transform to the GPU, on the batch after it is copied"
    return Advice(
        action,
        f"{share:.0%} of loading time is {function.name}{' and what it calls' if function.own else ''}{called}",
        f"up to {gain:.2f}x if it cost nothing",
        gain,
        location=where,
    )
