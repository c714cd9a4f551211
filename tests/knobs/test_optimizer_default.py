"""optimizer_impl's default means what the optimizer's default step was seen to run here
(``SearchContext.optimizer_default``), not PyTorch's rule for its common optimizers: on a GPU, an optimizer that
loops by default (Adafactor, a third party's) keeps foreach as a candidate of its own, and a costly step of it is
told to take foreach. Where it was not seen, the rule stands in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.knobs import KNOBS
from autotune.measure.profiling import ProfileResult
from autotune.results.diagnosis import OVERHEAD_BOUND
from autotune.results.remedies import advise
from autotune.study.space import build_space
from tests.conftest import NEUTRAL_KNOBS, cpu_context
from tests.results.profile_records import profile_result

ALL_DEFAULT = dict.fromkeys(KNOBS)


@pytest.mark.parametrize(
    ("device", "seen", "means"),
    [
        ("cuda", "for_loop", "for_loop"),
        ("cuda", "fused", "fused"),
        ("cpu", "foreach", "foreach"),
        ("cuda", None, "foreach"),
        ("cpu", None, "for_loop"),
    ],
)
def test_default_means_what_the_optimizers_default_step_was_seen_to_run(device, seen, means):
    ctx = cpu_context(device=device, optimizer_default=seen)
    assert KNOBS["optimizer_impl"].resolve("default", ctx) == means


def test_on_a_gpu_an_optimizer_that_loops_by_default_keeps_foreach_as_a_candidate_of_its_own():
    loops = cpu_context(device="cuda", optimizer_default="for_loop")
    assert build_space(ALL_DEFAULT, loops).candidates["optimizer_impl"] == ["default", "foreach", "fused"]
    takes_foreach = cpu_context(device="cuda", optimizer_default="foreach")
    assert build_space(ALL_DEFAULT, takes_foreach).candidates["optimizer_impl"] == ["default", "fused"]


def test_on_a_gpu_a_costly_step_of_an_optimizer_that_loops_by_default_is_told_to_take_foreach():
    gpu = profile_result(small_operators=0.8, optimizer_share=0.2, device_busy=0.2)
    loops = replace(gpu, optimizer_options=["foreach", "fused"], optimizer_default="for_loop")
    knobs = {**NEUTRAL_KNOBS, "batch_size": 16}
    advice = [a for a in advise(loops, OVERHEAD_BOUND, knobs, 8, None) if a.knob == "optimizer_impl"]
    assert [a.action for a in advice] == ["set optimizer_impl=foreach"]
    assert "run as for_loop" in advice[0].why


def test_a_profile_keeps_what_the_default_ran_and_one_stored_before_it_was_read_holds_none():
    loops = replace(profile_result(), optimizer_default="for_loop")
    assert ProfileResult.from_dict(loops.to_dict()).optimizer_default == "for_loop"
    stored_before = {key: value for key, value in loops.to_dict().items() if key != "optimizer_default"}
    assert ProfileResult.from_dict(stored_before).optimizer_default is None
