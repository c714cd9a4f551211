"""The pipeline's callables are called as the user's loop calls them: no wrapper of Hydra's in the timed loop."""

from __future__ import annotations

import functools

import torch

from autotune.pipeline.build import build_component
from autotune.pipeline.spec import PipelineSpec

SPEC = PipelineSpec(
    "plain",
    {
        "collate_fn": {"_target_": "torch.utils.data.default_collate"},
        "loss": {"_target_": "torch.nn.functional.cross_entropy", "label_smoothing": 0.1},
        "optimizer": {"_target_": "torch.optim.SGD", "lr": 0.1},
    },
)


def test_a_callable_built_partially_is_a_plain_partial_of_the_same_target_and_arguments():
    for key in ("collate_fn", "loss", "optimizer"):
        built = build_component(SPEC, key)
        assert type(built) is functools.partial, f"{key}: {type(built)} authorises its target again at each call"
    loss = build_component(SPEC, "loss")
    assert loss.func is torch.nn.functional.cross_entropy and loss.keywords == {"label_smoothing": 0.1}
    logits, target = torch.tensor([[2.0, 0.0]]), torch.tensor([0])
    assert torch.equal(loss(logits, target), torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1))
    assert build_component(SPEC, "optimizer")([torch.nn.Parameter(torch.zeros(2))]).defaults["lr"] == 0.1
