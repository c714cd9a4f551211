"""What the inspection reads of the model and the optimizer before any trial: a model that cannot go channels-last
leaves channels_last out of the search, with why (the model built once, on the meta device); an optimizer whose step
needs a closure, whose options torch refuses, or that builds no optimizer, is refused naming its key; one that
fails on the inspection's test parameters otherwise is left to the trial."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.pipeline.inspect import inspect_pipeline
from autotune.runner import inspect_run, search_context
from autotune.study.space import build_space
from tests.conftest import cpu_context, tiny_config

ALL_DEFAULT = dict.fromkeys(KNOBS)


class VolumeBeside(nn.Module):
    """A 2-D convolution over the 4-D image batch beside a Conv3d: its 5-D weight cannot go channels_last."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3)
        self.volume = nn.Conv3d(1, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.image(x).mean(dim=(2, 3))


class DepthBuffer(nn.Module):
    """A 2-D convolution holding a 5-D buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3)
        self.register_buffer("depth", torch.zeros(1, 1, 2, 2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.image(x).mean(dim=(2, 3))


class LazyHead(nn.Module):
    """A 2-D convolution and a lazy linear head, whose weight has no shape until the first forward."""

    def __init__(self) -> None:
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3)
        self.head = nn.LazyLinear(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.image(x).flatten(1))


class Counted(nn.Module):
    """A 2-D convolution that writes a line to ``log`` each time it is built: the device its weight is on."""

    def __init__(self, log: str) -> None:
        super().__init__()
        self.image = nn.Conv2d(3, 4, 3)
        with open(log, "a") as built:
            built.write(f"{self.image.weight.device.type}\n")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.image(x).mean(dim=(2, 3))


def _spec(model: str | None = None, optimizer: str | None = None):
    config = tiny_config()
    if model:
        config["pipeline"]["model"] = {"_target_": model}
    if optimizer:
        config["pipeline"]["optimizer"] = {"_target_": optimizer, "_partial_": True, "lr": 0.1}
    return load_settings(config, "tiny").pipeline


@pytest.mark.parametrize("model", [VolumeBeside, DepthBuffer], ids=["parameter", "buffer"])
def test_a_model_with_a_5d_tensor_beside_4d_inputs_leaves_channels_last_out_with_why(model):
    facts = inspect_pipeline(_spec(f"{__name__}.{model.__name__}"))
    assert facts.input_ndim == 4 and "rank 4" in facts.channels_last_refused, "what torch raised converting it"
    ctx = cpu_context(channels_last_refused=facts.channels_last_refused)
    assert build_space(ALL_DEFAULT, ctx).candidates["channels_last"] == [False]
    with pytest.raises(ConfigError, match=r"^search.channels_last: True cannot run here: the model cannot be conv"):
        build_space({**ALL_DEFAULT, "channels_last": [False, True]}, ctx)


def test_a_model_with_a_lazy_module_is_inspected_and_leaves_channels_last_out_with_why():
    # Module.to(memory_format=...) raises ValueError on a lazy module's parameters: as in a trial, before any forward.
    facts = inspect_pipeline(_spec(f"{__name__}.LazyHead"))
    assert "uninitialized parameter" in facts.channels_last_refused


def test_a_model_that_converts_keeps_channels_last_in_the_search():
    facts = inspect_pipeline(_spec())
    assert facts.channels_last_refused is None
    assert build_space(ALL_DEFAULT, cpu_context()).candidates["channels_last"] == [False, True]


@pytest.mark.parametrize(
    ("dataset", "builds"),
    [("tests.fixtures.tiny.TinyImages", ["meta"]), ("tests.fixtures.profiled.InMemoryFeatures", [])],
    ids=["4-D images", "2-D features"],
)
def test_the_inspection_builds_a_model_class_once_on_the_meta_device_only_where_inputs_can_go_channels_last(
    tmp_path, dataset, builds
):
    # In the inspection's subprocess, as a run starts it: the model's __init__ runs at most once, allocating nothing.
    log = tmp_path / "built"
    config = tiny_config()
    config["pipeline"]["model"] = {"_target_": f"{__name__}.Counted", "log": str(log)}
    config["pipeline"]["dataset"] = {"_target_": dataset}
    facts = inspect_run(load_settings(config, "tiny"), tmp_path)
    assert facts.pipeline.channels_last_refused is None
    assert (log.read_text().split() if log.exists() else []) == builds


def test_the_search_context_carries_what_the_inspection_read_of_channels_last(tiny_settings):
    refused = PipelineFacts(256, 4, channels_last_refused="required rank 4 tensor to use channels_last format")
    facts = Inspection(DeviceFacts(), "cpu", refused, machine={"cpu_count": 2, "torch_threads": 2})
    ctx = search_context(tiny_settings, facts)
    assert ctx.channels_last_refused == refused.channels_last_refused
    assert Inspection.from_dict(facts.to_dict()) == facts, "as the subprocess hands it to the tuner"


def test_an_optimizer_whose_step_needs_a_closure_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as error:
        inspect_pipeline(_spec(optimizer="torch.optim.LBFGS"))
    assert str(error.value) == (
        "pipeline.optimizer: torch.optim.LBFGS.step() requires closure: autotune steps the optimizer as "
        "optimizer.step(), without a closure; choose one that steps without (torch.optim.SGD, Adam, AdamW)"
    )
    assert inspect_pipeline(_spec(optimizer="torch.optim.AdamW")).optimizer_options, "a closure it may take: passes"


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"_target_": "torch.optim.Adam", "lr": -1}, "torch.optim.Adam failed: ValueError: Invalid learning rate: -1"),
        (
            {"_target_": "torch.optim.SGD", "lr": 0.1, "momentum": 0.9, "nesterov": True, "dampening": 0.5},
            "torch.optim.SGD failed: ValueError: Nesterov momentum requires a momentum and zero dampening",
        ),
    ],
    ids=["Adam lr=-1", "SGD nesterov with dampening"],
)
def test_an_optimizer_whose_options_torch_refuses_is_refused_naming_the_key(options, refusal):
    config = tiny_config()
    config["pipeline"]["optimizer"] = {**options, "_partial_": True}
    with pytest.raises(ConfigError) as error:
        inspect_pipeline(load_settings(config, "tiny").pipeline)
    assert str(error.value) == (
        f"pipeline.optimizer: building {refusal} (the inspection built it on lone test parameters, a vector and a "
        "matrix, together and each alone: each try raised this)"
    )


def test_an_optimizer_option_of_the_wrong_type_is_refused_naming_the_key():
    # lr: "0.001" quoted in YAML: torch's check raises a TypeError on every try, whatever the parameters
    config = tiny_config()
    config["pipeline"]["optimizer"] = {"_target_": "torch.optim.Adam", "lr": "0.001", "_partial_": True}
    with pytest.raises(ConfigError) as error:
        inspect_pipeline(load_settings(config, "tiny").pipeline)
    assert str(error.value).startswith("pipeline.optimizer: building torch.optim.Adam failed: TypeError: ")


class MuonWithAdamW(torch.optim.Optimizer):
    """Muon for the matrices, AdamW for the rest, in one optimizer: each refuses an empty list of parameters."""

    def __init__(self, params, lr: float = 0.02) -> None:
        params = list(params)
        self.muon = torch.optim.Muon([p for p in params if p.ndim == 2], lr=lr)
        self.adam = torch.optim.AdamW([p for p in params if p.ndim != 2], lr=lr)
        super().__init__(params, {})

    def step(self, closure=None) -> None:
        self.muon.step()
        self.adam.step()


def refuses_lone_parameters(params, lr: float = 0.1) -> torch.optim.Optimizer:
    """An optimizer factory that needs more parameters than the inspection's, with a message of each try's own."""
    params = list(params)
    if len(params) < 3:
        raise ValueError(f"expected the model's parameters, got {len(params)}")
    return torch.optim.SGD(params, lr=lr)


def optimizer_list(params, lr: float = 0.1) -> list:
    """Returns a list of optimizers, not one."""
    return [torch.optim.SGD(list(params), lr=lr)]


@pytest.mark.parametrize("factory", [MuonWithAdamW, refuses_lone_parameters], ids=["split by shape", "other"])
def test_an_optimizer_that_fails_on_test_parameters_but_not_alike_on_each_is_left_to_the_trial(factory):
    # Only the same ValueError on every try is an option torch refuses whatever the parameters.
    assert inspect_pipeline(_spec(optimizer=f"{__name__}.{factory.__name__}")).dataset_len == 256


def test_an_optimizer_factory_that_builds_no_optimizer_is_refused_naming_the_key():
    with pytest.raises(ConfigError) as error:
        inspect_pipeline(_spec(optimizer=f"{__name__}.optimizer_list"))
    assert str(error.value) == (
        f"pipeline.optimizer: {__name__}.optimizer_list built a list, not an optimizer: autotune calls its step() and "
        "zero_grad(); name an optimizer's class, or a function that returns one (several optimizers: one "
        "torch.optim.Optimizer that steps them all)"
    )


def test_an_optimizer_of_matrices_alone_is_built_on_a_matrix_not_refused():
    assert inspect_pipeline(_spec(optimizer="torch.optim.Muon")).dataset_len == 256, "Muon takes no vector"
