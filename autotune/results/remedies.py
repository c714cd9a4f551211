"""What to change, ranked by what the measurements say it can bring: a knob where a knob fixes the bottleneck
(and whether the tuner tried it), the user's own code where none does.

Each expected effect is an upper bound from the profiled step's stages, as a long run reads them and the verdict too
(``diagnosis.figures``: the waits at epochs' starts once an epoch, ``autotune/results/epochs.py``), and a share of
the step it states is of that step, said so where it differs from the timed steps' (``Figures.step_named``);
how the stages bound the advice on loading data: ``loading_remedies``, on the model step: ``step_remedies``.
Keeping freed memory (``malloc``) saves at most the kernel's share of the step's working time: its page faults are
a part of that share, which holds the kernel's other work too.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import Any

import yaml

from autotune.knobs import KNOBS
from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import (
    DATA_BOUND,
    OVERHEAD_BOUND,
    STEP_UNKNOWN,
    Figures,
    fault_finding,
    figures,
    gc_finding,
    leaks,
    saturation_finding,
)
from autotune.results.epochs import epoch_starts
from autotune.results.loading_remedies import (
    cheaper_loading_advice,
    loop_with_loading,
    num_workers_advice,
    persistent_workers_advice,
    saturated_step,
)
from autotune.results.remedy_model import Advice, Tried
from autotune.results.step_remedies import arithmetic_advice, overhead_advice, search_context

# Host-to-device copies taking 10 % of the step or more: pinned memory makes them asynchronous.
TRANSFER_SHARE = 0.10
# An expected effect under 2 % is within a profiling run's noise: no advice (every advice with a gain: ``advise``).
MIN_EXPECTED_GAIN = 1.02


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
    estimate next, those the study measured no faster beyond noise (``Tried.no_gain``) last; any whose
    expected gain is under ``MIN_EXPECTED_GAIN`` left out. ``tried`` is
    the stored study of the pipeline (None where there is none: the advice then says nothing of it); a knob whose
    recommended value ``knobs`` already run gets no advice to set another value the study measured
    (``Tried.settled``)."""
    starts, found = epoch_starts(result), figures(result)
    ctx = search_context(result, knobs, cpu_count, sixteen_bit, channels_last_refused)
    advice: list[Advice] = [_leak_advice(str(leak)) for leak in leaks(result)]
    ranked: list[Advice] = []
    if verdict == DATA_BOUND:
        ranked += num_workers_advice(result, found, knobs, cpu_count, tried, starts)
        workers = knobs["num_workers"]
        ranked += cheaper_loading_advice(result, found, lambda saved: loop_with_loading(found, saved, workers, starts))
    elif saturation_finding(result, cpu_count):  # loading takes the cores the model step needs
        ranked += cheaper_loading_advice(result, found, lambda saved: saturated_step(result, found, saved, cpu_count))
    if verdict == OVERHEAD_BOUND:
        ranked += overhead_advice(result, found, knobs, ctx, effective_batch_size)
    elif verdict not in (DATA_BOUND, STEP_UNKNOWN):  # which limits the model step unknown: no guess
        ranked += arithmetic_advice(result, found, knobs, ctx, verdict, tried)
    ranked += (
        persistent_workers_advice(result, found, starts, knobs)
        + _transfer(result, found, knobs)
        + _garbage(result, found)
    )
    ranked += _allocator(result, found, knobs) if glibc else []
    unsettled = (
        a
        for a in ranked
        if (a.gain is None or a.gain >= MIN_EXPECTED_GAIN)
        and (a.knob is None or tried is None or not tried.settled(a.knob, knobs, _suggested(a)))
    )
    told = [_with_tried(a, tried, knobs) for a in unsettled]
    # Advice the study measured no faster beyond noise (``Tried.no_gain``: alike but for its knob, or slower than the
    # baseline wherever it ran the value) comes last: the estimate reads one profile, the study measured the change.
    return advice + sorted(told, key=lambda a: (a.measured_no_gain, -(a.gain or 0.0)))  # a leak's has no knob


def _with_tried(advice: Advice, tried: Tried | None, knobs: dict[str, Any]) -> Advice:
    """``advice`` with what the study ``tried`` says of its change, and whether it measured it no faster beyond noise
    (``Tried.no_gain``): its effect then says that its "up to" is a bound the measurement did not bear out."""
    if advice.knob is None or tried is None:
        return advice
    value, now = _suggested(advice), knobs.get(advice.knob)
    said, no_gain = tried.says(advice.knob, value, now), tried.no_gain(advice.knob, now, value)
    effect = advice.effect
    if no_gain and advice.gain is not None:
        read = tried.measured(advice.knob, now, value)
        effect += (
            f"; but a bound from this profile, which the study's measurement did not bear out: the change read {read}"
        )
    return Advice(**{**asdict(advice), "effect": effect, "tried": said, "measured_no_gain": no_gain})


def first_to_follow(advice: list[Advice]) -> Advice | None:
    """The advice to follow next of ``advice`` (ranked, as ``advise`` gives it): the first whose change the study
    did not measure no faster beyond noise (``Advice.measured_no_gain``); None where there is none."""
    return next((a for a in advice if not a.measured_no_gain), None)


def _suggested(advice: Advice) -> Any:
    """The value ``advice.action`` sets its knob to, as the knob reads it ("set num_workers=2" → 2,
    "set channels_last=True" → True)."""
    text = re.search(rf"{advice.knob}=(\S+)", advice.action)
    value = text.group(1).rstrip(".,;:") if text else None
    return KNOBS[advice.knob].parse(yaml.safe_load(value)) if value is not None else None


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
            f"{what} {share:.0%} of {found.step_named} (≥ {TRANSFER_SHARE:.0%})",
            f"up to {gain:.2f}x when the copies overlap the step{left}",
            gain,
            knob="pin_memory",
        )
    ]


def _garbage(result: ProfileResult, found: Figures) -> list[Advice]:
    """Collections kept out of the steps, where their pauses took ``diagnosis.GC_PAUSE_SHARE`` of the timed steps or
    more: a long run's step (``found``) less the pauses a timed step held."""
    finding = gc_finding(result)
    if finding is None:
        return []
    gain = found.loop_s / (found.loop_s - result.gc.share * result.stages.loop_s)
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
