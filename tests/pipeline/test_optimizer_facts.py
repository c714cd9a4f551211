"""What stepping the pipeline's optimizer shows (``optimizer_facts``): the implementations it can be switched to and
the one its default runs, read from one step of its default, in the inspection and in a profiling run alike."""

from __future__ import annotations

import pytest
import torch

from autotune.measure.profiling import ProfilePlan
from autotune.pipeline.build import Pipeline
from autotune.pipeline.inspect import inspect_pipeline
from autotune.trial.profiling import run_profile
from tests.conftest import NEUTRAL_KNOBS
from tests.fixtures.tiny import TinyCNN, TinyImages
from tests.pipeline.test_inspected_knob_facts import _spec


class DefaultStepsCounted(torch.optim.SGD):
    """SGD that counts the steps of its default (neither foreach nor fused set) on one-element parameters, the
    inspection's test parameters, apart from the steps a trainer takes on a model's."""

    default_test_steps = 0

    def __init__(self, params, lr: float = 0.1, foreach: bool | None = None, fused: bool | None = None) -> None:
        super().__init__(params, lr=lr, foreach=foreach, fused=fused)
        on_test_parameters = all(p.numel() == 1 for group in self.param_groups for p in group["params"])
        self.counted = foreach is None and fused is None and on_test_parameters

    def step(self, closure=None):
        DefaultStepsCounted.default_test_steps += self.counted
        return super().step(closure)


@pytest.fixture
def counted_steps(monkeypatch):
    monkeypatch.setattr(DefaultStepsCounted, "default_test_steps", 0)
    return DefaultStepsCounted


def test_the_inspection_steps_the_optimizers_default_once_for_its_options_and_its_default(counted_steps):
    facts = inspect_pipeline(_spec(optimizer=f"{__name__}.DefaultStepsCounted"))
    assert facts.optimizer_options == {"for_loop", "foreach", "fused"} and facts.optimizer_default == "for_loop"
    assert counted_steps.default_test_steps == 1


def test_a_profiling_run_steps_the_optimizers_default_once_for_its_options_and_its_default(counted_steps, tmp_path):
    pipeline = Pipeline(TinyCNN(), TinyImages(64), torch.nn.CrossEntropyLoss(), DefaultStepsCounted, None, None)
    plan = ProfilePlan(str(tmp_path / "t.pt.trace.json"), steps=2, min_time_s=0.0, trace_steps=1, hot_batches=1)
    profile = run_profile(pipeline, {**NEUTRAL_KNOBS, "batch_size": 8}, torch.device("cpu"), plan)
    assert profile.optimizer_options == ["for_loop", "foreach", "fused"] and profile.optimizer_default == "for_loop"
    assert counted_steps.default_test_steps == 1
