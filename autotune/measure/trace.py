"""A profiler trace of a few training steps: torch.profiler with a wait, warm-up and active schedule, the trace
exported in Chrome's trace format (Perfetto, chrome://tracing and TensorBoard's profiler plugin open it), and the
operators that took the time.

Each step's stages are marked with ``record_function`` ranges (``DATA``, ``TRANSFER``, ``STEP``), which show in the
trace; the operators that ran inside the training step's range (``STEP``) are summed by name, so that what loading
data costs in the training process is not counted as the model's. On a GPU the step ends waiting for the device, in
a range of its own inside the step's (``DEVICE_WAIT``): the step's time holds the device's, and the host's time
outside any operator holds none of that wait, which is the device's work, not the host's overhead.
"""

from __future__ import annotations

import bisect
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from autotune.knobs import whole_cycles
from autotune.measure.gpu import synchronize
from autotune.measure.loading import Instrumented
from autotune.measure.profiling import DEVICE_WAIT, OperatorProfile, OperatorStat
from autotune.measure.stages import StepParts

DATA, TRANSFER, STEP = "autotune: data wait", "autotune: host-to-device", "autotune: train step"
# The profiler's step range, the DataLoader's range of each batch and the stage ranges above are marks, not operators;
# so is the device wait, kept apart (``_device_wait``).
_MARKS = (DATA, TRANSFER, STEP, DEVICE_WAIT, "ProfilerStep", "enumerate(DataLoader)")
_TOP = 15
_US = 1e-6


def trace_steps(
    parts: StepParts, batches: Iterator[Instrumented], device: torch.device, active: int, path: Path
) -> OperatorProfile:
    """Profile training steps on ``batches`` (one skipped, one of warm-up, ``active`` recorded) and export the
    trace to ``path`` (name it ``*.pt.trace.json``, the name TensorBoard's plugin looks for).

    ``active`` is rounded up to whole cycles of ``parts.accumulation_steps``: under gradient accumulation a step is a
    micro-batch and the optimizer steps once a cycle, which part of a cycle may hold or miss (its operators then
    weigh more or less than in training, or are missing)."""
    active = whole_cycles(active, parts.accumulation_steps)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=active, repeat=1),
        on_trace_ready=lambda prof: prof.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(2 + active):
            with record_function(DATA):
                item = next(batches)
            with record_function(TRANSFER):
                batch = parts.to_device(item.batch)
            with record_function(STEP):
                parts.train_step(batch)
                if device.type == "cuda":  # a range of its own: the step's self time (outside operators) less it
                    with record_function(DEVICE_WAIT):
                        synchronize(device)
            prof.step()
    return replace(_operator_profile(prof, active, str(path), device.type), dispatch_s=dispatch_cost())


def dispatch_cost(calls: int = 2000) -> float:
    """The mean seconds of one call of a trivial operator (a one-element CPU add): Python to C++ and back, the
    dtype and device checks, and no arithmetic to speak of."""
    one = torch.zeros(1)
    start = time.perf_counter()
    for _ in range(calls):
        torch.add(one, 1)
    return (time.perf_counter() - start) / calls


def _operator_profile(prof: profile, active: int, trace_file: str, device: str) -> OperatorProfile:
    events = prof.events()
    steps = _ranges(events, STEP)
    waits = _ranges(events, DEVICE_WAIT)
    in_step, in_wait = _within(steps), _within(waits)
    # What ran while the host waited for the device (a runtime's synchronize, where recorded) is that wait.
    inside = [
        e for e in events if not _is_mark(e.name) and e.device_type.name == "CPU" and in_step(e) and not in_wait(e)
    ]
    by_device = device == "cuda"
    top = [_stat(e.key, e.count, e.self_cpu_time_total, e.self_device_time_total) for e in prof.key_averages()]
    top = [op for op in top if not _is_mark(op.name)]
    top.sort(key=lambda op: op.self_device_s if by_device else op.self_cpu_s, reverse=True)
    return OperatorProfile(
        active_steps=active,
        trace_file=trace_file,
        device=device,
        step_s=sum(end - start for start, end, _ in steps) * _US,
        outside_operators_s=sum(e.self_cpu_time_total for _, _, e in steps) * _US,
        top=top[:_TOP],
        step_operators=_by_name(inside) + _device_wait(waits),
    )


def _ranges(events: list, name: str) -> list[tuple[float, float, Any]]:
    """The ranges named ``name`` among ``events``: (start, end, event), in order (µs)."""
    return sorted((e.time_range.start, e.time_range.end, e) for e in events if e.name == name)


def _within(ranges: list[tuple[float, float, Any]]) -> Callable[[Any], bool]:
    """Whether an event starts inside one of ``ranges`` (``_ranges``: in order, none overlapping another)."""
    starts = [start for start, _, _ in ranges]

    def inside(event) -> bool:
        index = bisect.bisect_right(starts, event.time_range.start) - 1
        return index >= 0 and event.time_range.start < ranges[index][1]

    return inside


def _device_wait(waits: list[tuple[float, float, Any]]) -> list[OperatorStat]:
    """The host's waits for the device at the steps' ends (``DEVICE_WAIT``: ``_ranges``), whole, kept among the
    step's operators under that name so that the diagnosis tells them from the host's overhead
    (``diagnosis.DEVICE_WAIT``); none off a GPU."""
    if not waits:
        return []
    spans = [(end - start) * _US for start, end, _ in waits]
    return [OperatorStat(DEVICE_WAIT, len(spans), sum(spans), 0.0, median_call_cpu_s=statistics.median(spans))]


def _by_name(events: list) -> list[OperatorStat]:
    calls: dict[str, list] = {}
    for event in events:
        calls.setdefault(event.name, []).append(event)
    stats = [_calls_stat(name, each) for name, each in calls.items()]
    return sorted(stats, key=lambda op: op.self_cpu_s + op.self_device_s, reverse=True)


def _calls_stat(name: str, calls: list) -> OperatorStat:
    """The operator ``name`` over its ``calls`` (the profiler's events), with its median call's host self time."""
    host = [call.self_cpu_time_total * _US for call in calls]
    device = sum(call.self_device_time_total for call in calls) * _US
    return OperatorStat(name, len(calls), sum(host), device, median_call_cpu_s=statistics.median(host))


def _stat(name: str, calls: int, self_cpu_us: float, self_device_us: float) -> OperatorStat:
    return OperatorStat(name, calls, self_cpu_us * _US, self_device_us * _US)


def _is_mark(name: str) -> bool:
    return name.startswith(_MARKS)
