"""What a recommended batch size means for training: the learning rate's scaling rule, and what accumulation keeps."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import yaml

from autotune.recommendation import Recommendation
from autotune.report.recommended import render_recommended
from autotune.results.advice import batch_advice, optimizer_rule
from autotune.results.summary import summarise
from tests.results.test_summary import results_with, trial


def study(optimizer, batch=64, policy="free"):
    """A study whose baseline trains batch 16 and whose recommendation trains ``batch``."""
    return replace(results_with(trial("0", 200.0, batch_size=batch)), batch_policy=policy, optimizer=optimizer)


def advice_for(optimizer, batch=64, policy="free"):
    results = study(optimizer, batch, policy)
    return batch_advice(results, summarise(results))


@pytest.mark.parametrize(
    "target, rule",
    [
        ("torch.optim.SGD", "linear"),
        ("torch.optim.sgd.SGD", "linear"),
        *((f"torch.optim.{name}", "square-root") for name in ("Adam", "AdamW", "Adamax", "NAdam", "RAdam")),
        *((f"torch.optim.{name}", "square-root") for name in ("Adagrad", "RMSprop", "Adadelta")),
        ("torch.optim.LBFGS", None),
        ("mylib.optim.Adam", None),
        (None, None),
    ],
)
def test_the_scaling_rule_follows_the_optimizer_class(target, rule):
    assert optimizer_rule(target) == rule


def test_sgd_scales_the_learning_rate_linearly():
    advice = advice_for({"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.01, "momentum": 0.9})
    assert advice.rule == "linear" and advice.suggested_learning_rate == pytest.approx(0.04)
    assert "by the linear scaling rule" in advice.describe() and "scale the learning rate by 4" in advice.describe()


def test_adam_scales_the_learning_rate_by_the_square_root_of_the_batch_ratio():
    advice = advice_for({"_target_": "torch.optim.AdamW", "_partial_": True, "lr": 0.0003})
    assert advice.rule == "square-root"
    assert advice.suggested_learning_rate == pytest.approx(0.0006), "batch 16 -> 64: sqrt(4) = 2, not 4"
    note = advice.describe()
    assert "by the square-root scaling rule" in note and "(learning rate 0.0003 → 0.0006)" in note
    assert "linear" not in note


def test_an_unknown_optimizer_is_named_and_scaled_linearly():
    advice = advice_for({"_target_": "mylib.Lion", "lr": 0.01}, batch=32)
    assert advice.rule == "linear" and advice.suggested_learning_rate == pytest.approx(0.02)
    assert "assumed: autotune does not know the optimizer mylib.Lion" in advice.describe()


def test_an_adaptive_optimizer_without_a_learning_rate_still_records_its_rule():
    advice = advice_for({"_target_": "torch.optim.Adam"}, batch=32)
    assert advice.rule == "square-root" and advice.suggested_learning_rate is None
    assert "scale the learning rate by " + f"{math.sqrt(2):g}" in advice.describe()


def test_accumulated_micro_batches_keep_the_effective_batch_but_not_batch_statistics():
    note = advice_for({"_target_": "torch.optim.SGD", "lr": 0.01}, batch=4, policy="fixed_effective").describe()
    assert "the same effective batch and learning rate" in note
    assert "layers that compute statistics over the batch (BatchNorm) see micro-batches of 4" in note
    assert "unchanged" not in note and "identical" not in note


def test_a_changed_batch_does_not_promise_identical_training_under_fixed_effective():
    note = advice_for({"_target_": "torch.optim.SGD", "lr": 0.01}).describe()
    assert "search.batch_policy=fixed_effective" in note and "identical" not in note


def test_the_training_script_scales_the_learning_rate_by_the_rule_recommended_yaml_records():
    results = study({"_target_": "torch.optim.Adam", "lr": 0.001})
    document = yaml.safe_load(render_recommended(results, summarise(results)))
    assert document["training"]["learning_rate"]["rule"] == "square-root"
    rec = Recommendation.from_document(document)
    assert rec.learning_rate(0.001) == pytest.approx(document["training"]["learning_rate"]["suggested"])
    assert rec.learning_rate(0.001) == pytest.approx(0.002)
