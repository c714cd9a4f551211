"""The shipped example pipelines build from their YAML, train, and are deterministic."""

from __future__ import annotations

import math

import pytest
import torch
import yaml
from hydra.utils import instantiate
from torch.utils.data import DataLoader

from tests.conftest import REPO

# Pipeline name -> the ndim of one batched input.
PIPELINES = {"images": 4, "transformer_lm": 2, "tabular_mlp": 2}


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "conf" / "pipeline" / f"{name}.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("name", "ndim"), PIPELINES.items())
def test_the_pipeline_trains_two_steps(name, ndim):
    config = load(name)
    assert config["name"] == name and config["collate_fn"] is None and config["step"] is None
    torch.manual_seed(0)
    model = instantiate(config["model"])
    dataset = instantiate(config["dataset"])
    loss_fn = instantiate(config["loss"])
    optimizer = instantiate(config["optimizer"])(model.parameters())
    batch_size = config["baseline"]["batch_size"]
    assert len(dataset) // (4 * batch_size) >= 60, "too few batches at 4x the baseline batch size"
    inputs, targets = next(iter(DataLoader(dataset, batch_size=batch_size, shuffle=True, drop_last=True)))
    assert inputs.ndim == ndim and inputs.shape[0] == batch_size
    for _ in range(2):
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        assert math.isfinite(loss.item())


@pytest.mark.parametrize("name", PIPELINES)
def test_the_dataset_is_deterministic(name):
    node = load(name)["dataset"]
    first, second = instantiate(node), instantiate(node)
    for index in (0, 7, len(first) - 1):
        for a, b in zip(first[index], second[index], strict=True):
            assert torch.equal(a, b)


def test_images_are_normalised_64px_crops_of_decoded_jpegs():
    dataset = instantiate(load("images")["dataset"])
    image, label = dataset[3]
    assert image.shape == (3, 64, 64) and image.dtype == torch.float32 and label.dtype == torch.int64
    assert dataset.jpegs[0][:2] == b"\xff\xd8"  # JPEG start-of-image marker
    assert -3 < image.mean().item() < 3 and image.std().item() > 0.05


def test_the_language_model_predicts_the_next_token_with_logits_batch_vocab_time():
    config = load("transformer_lm")
    dataset = instantiate(config["dataset"])
    inputs, targets = dataset[5]
    assert inputs.dtype == targets.dtype == torch.int64 and torch.equal(inputs[1:], targets[:-1])
    model = instantiate(config["model"]).eval()
    tokens = inputs.unsqueeze(0)
    logits = model(tokens)
    assert logits.shape == (1, config["model"]["vocab_size"], tokens.shape[1])
    # Causal: the logits at position t do not depend on tokens after t.
    changed = tokens.clone()
    changed[0, 40:] = (changed[0, 40:] + 1) % config["model"]["vocab_size"]
    with torch.no_grad():
        assert torch.allclose(model(tokens)[..., :40], model(changed)[..., :40], atol=1e-5)
