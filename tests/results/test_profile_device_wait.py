"""On a GPU whose trace recorded no kernel, the host's wait for the GPU at the step's end (timed apart by the trace:
``profiling.DEVICE_WAIT``) is neither the host's overhead nor its operators' work; in a trace that did not time it
apart, which of the two limits the model step is unknown, said so, and no advice follows from a guess."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.results.diagnosis import COMPUTE_BOUND, STEP_UNKNOWN, figures, verdict
from autotune.results.remedies import advise
from tests.results.profile_records import profile_result
from tests.results.test_profile_advice_review import KNOBS

# A GPU-bound step: the host waits for the GPU 60 % of the model step as the trace timed it.
WAIT_SHARE = 0.6


def gpu_bound(told_apart: bool):
    """A GPU profile without kernel times (no CUPTI) whose host waited for the GPU ``WAIT_SHARE`` of the model step:
    timed apart where ``told_apart``; else, as a trace stored before, in the step's time outside operators."""
    result = profile_result(device_busy=0.0, device_wait_s=0.0 if told_apart else None)
    ops = result.operators
    wait_s = WAIT_SHARE * ops.step_s
    if told_apart:
        (*operators, wait) = ops.step_operators
        return replace(result, operators=replace(ops, step_operators=[*operators, replace(wait, self_cpu_s=wait_s)]))
    return replace(result, operators=replace(ops, outside_operators_s=wait_s))


def advised(result, decided) -> list[str | None]:
    return [a.knob for a in advise(result, decided, {**KNOBS, "set_to_none": True}, 8, None)]


def test_the_hosts_wait_for_the_gpu_timed_apart_is_no_overhead():
    result = gpu_bound(told_apart=True)
    assert figures(result).overhead_share == pytest.approx(0.0), "the wait is the GPU's work, not the host's"
    decided, rules = verdict(result)
    assert decided == COMPUTE_BOUND and "batch_size" not in advised(result, decided), "no overhead's advice"
    assert str(rules[1]).startswith("host overhead, of the model step (no GPU kernel recorded: read on the host)")


def test_where_the_wait_was_not_timed_apart_the_overhead_or_compute_verdict_is_unknown():
    result = gpu_bound(told_apart=False)
    decided, rules = verdict(result)
    assert decided == STEP_UNKNOWN, "not host-overhead-bound from a wait that may be the GPU's work"
    assert len(rules) == 2 and not rules[0].holds, "rule 1 still read: not data-bound"
    said = str(rules[1])
    assert "the host's wait for the GPU not timed apart" in said and said.endswith(f"unknown: {STEP_UNKNOWN}")
    assert rules[1].gist == "host overhead unknown"
    guesses = {"compile", "batch_size", "amp", "channels_last"}
    assert not guesses & set(advised(result, decided)), "neither overhead's advice nor arithmetic's"


def test_a_gpu_trace_with_kernels_reads_the_gpu_busy_whether_or_not_the_wait_was_timed_apart():
    old = profile_result(device_busy=0.3, device_wait_s=None)
    decided, rules = verdict(old)
    assert str(rules[1]).startswith("the GPU busy, of the model step: 30.0%") and decided != STEP_UNKNOWN


def test_the_headline_of_an_unknown_step_verdict_keeps_gpu_in_capitals():
    from autotune.report.diagnosis import _headline
    from autotune.results.profile import Diagnosis

    said = _headline(Diagnosis(STEP_UNKNOWN, [])).lead
    assert said.startswith("Model-step-bound (host overhead or GPU work: unknown)"), said
