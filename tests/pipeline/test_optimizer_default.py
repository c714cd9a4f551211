"""Which implementation the optimizer's default runs, seen in the inspection by the aten operators one step of it
calls on test parameters: a fused operator, a foreach one, or neither (the per-parameter loop). The fact travels
to the tuner in the pipeline's facts and on to the knobs' search context."""

from __future__ import annotations

import functools

import torch

from autotune.measure.profiling import ProfilePlan
from autotune.pipeline.build import Pipeline
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.pipeline.inspect import inspect_pipeline, optimizer_facts
from autotune.runner import search_context
from autotune.trial.profiling import run_profile
from tests.conftest import NEUTRAL_KNOBS
from tests.fixtures.tiny import TinyCNN, TinyImages
from tests.pipeline.test_inspected_knob_facts import _spec


class ForeachSGD(torch.optim.Optimizer):
    """Plain SGD whose step always updates every parameter at once with a foreach operator, as a third party's
    optimizer may do by default on any device."""

    def __init__(self, params, lr: float = 0.1) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            torch._foreach_add_(params, [p.grad for p in params], alpha=-group["lr"])


class FailingStep(torch.optim.SGD):
    def step(self, closure=None):
        raise RuntimeError("no step here")


def test_an_optimizer_whose_default_step_calls_foreach_operators_reads_foreach():
    assert optimizer_facts(ForeachSGD, "cpu").default == "foreach"


def test_pytorchs_optimizers_loop_by_default_on_a_cpu():
    for optimizer in (torch.optim.SGD, torch.optim.Adam, torch.optim.Adafactor):
        assert optimizer_facts(functools.partial(optimizer, lr=0.1), "cpu").default == "for_loop", optimizer.__name__


def test_an_optimizer_built_with_fused_or_foreach_set_reads_what_it_runs():
    assert optimizer_facts(functools.partial(torch.optim.SGD, lr=0.1, fused=True), "cpu").default == "fused"
    assert optimizer_facts(functools.partial(torch.optim.Adam, lr=0.1, foreach=True), "cpu").default == "foreach"


def test_what_the_default_runs_is_none_where_it_cannot_be_seen():
    assert optimizer_facts(FailingStep, "cpu").default is None, "a step that fails: the trial reports it"
    assert optimizer_facts(lambda params: torch.optim.SGD(params, lr=-1.0), "cpu").default is None, "it builds on none"


def test_the_inspection_reads_it_and_the_search_context_carries_it(tiny_settings):
    facts = inspect_pipeline(_spec(optimizer="tests.pipeline.test_optimizer_default.ForeachSGD"))
    assert facts.optimizer_default == "foreach"
    inspection = Inspection(DeviceFacts(), "cpu", facts, machine={"cpu_count": 2, "torch_threads": 2})
    assert search_context(tiny_settings, inspection).optimizer_default == "foreach"


def test_the_facts_keep_it_through_the_subprocess_and_facts_stored_before_it_was_read_hold_none():
    facts = Inspection(
        DeviceFacts(), "cpu", PipelineFacts(256, 4, optimizer_default="for_loop"), machine={"cpu_count": 2}
    )
    assert Inspection.from_dict(facts.to_dict()) == facts
    stored = facts.to_dict()
    del stored["pipeline"]["optimizer_default"]
    assert Inspection.from_dict(stored).pipeline.optimizer_default is None


def test_a_profile_reads_it_as_the_inspection_does(tmp_path):
    pipeline = Pipeline(TinyCNN(), TinyImages(64), torch.nn.CrossEntropyLoss(), ForeachSGD, None, None)
    plan = ProfilePlan(str(tmp_path / "t.pt.trace.json"), steps=2, min_time_s=0.0, trace_steps=1, hot_batches=1)
    knobs = {**NEUTRAL_KNOBS, "batch_size": 8}
    assert run_profile(pipeline, knobs, torch.device("cpu"), plan).optimizer_default == "foreach"
