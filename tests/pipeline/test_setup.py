"""The training step with knobs applied: gradient accumulation, optimizer options, the loss check."""

from __future__ import annotations

import functools
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch

from autotune.errors import ConfigError
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.inspect import inspect_pipeline, optimizer_facts
from autotune.pipeline.setup import REFERENCE_SEEDS, Trainer, _worker_kill_signal, loss_problem
from tests.conftest import NEUTRAL_KNOBS, trial_request


def _trainer(effective_batch_size=None, model="tiny.TinyCNN", **knobs) -> Trainer:
    request = trial_request(model)
    values = {**NEUTRAL_KNOBS, "batch_size": 8, **knobs}
    return Trainer(build_pipeline(request.pipeline), values, torch.device("cpu"), effective_batch_size)


def _optimizer_steps(trainer: Trainer, batches: int) -> int:
    steps = 0
    original = trainer.optimizer.step

    def counting_step(*args, **kwargs):
        nonlocal steps
        steps += 1
        return original(*args, **kwargs)

    trainer.optimizer.step = counting_step
    for batch in [next(trainer.batches()) for _ in range(batches)]:
        trainer.train_step(trainer.to_device(batch))
    return steps


@pytest.mark.parametrize(
    ("loss", "kind"),
    [
        ({"_target_": "torch.nn.CrossEntropyLoss"}, torch.nn.CrossEntropyLoss),  # a class: built
        ({"_target_": "torch.nn.functional.cross_entropy"}, functools.partial),  # a function: called as it is
        ({"_target_": "torch.nn.functional.cross_entropy", "label_smoothing": 0.1}, functools.partial),
        ({"_target_": "tests.fixtures.batches.make_loss", "smoothing": 0.1}, torch.nn.CrossEntropyLoss),  # a factory
        ({"_target_": "tests.fixtures.batches.make_weighted_loss", "_args_": [4, 0.1]}, torch.nn.CrossEntropyLoss),
        ({"_target_": "tests.fixtures.batches.make_loss", "_partial_": False}, torch.nn.CrossEntropyLoss),
    ],
)
def test_a_loss_given_as_a_class_is_built_and_one_given_as_a_function_is_called(loss, kind):
    request = trial_request()
    spec = replace(request.pipeline, components={**request.pipeline.components, "loss": loss})
    trainer = Trainer(build_pipeline(spec), {**NEUTRAL_KNOBS, "batch_size": 8}, torch.device("cpu"), None)
    assert isinstance(trainer.pipeline.loss_fn, kind)
    assert math.isfinite(trainer.train_step(trainer.to_device(next(trainer.batches()))).item())


def test_a_step_that_returns_more_than_the_loss_is_told_what_pipeline_step_must_return():
    request = trial_request()
    step = {"_target_": "tests.fixtures.batches.step_returning_outputs"}
    spec = replace(request.pipeline, components={**request.pipeline.components, "step": step})
    trainer = Trainer(build_pipeline(spec), {**NEUTRAL_KNOBS, "batch_size": 8}, torch.device("cpu"), None)
    with pytest.raises(TypeError, match=r"^pipeline.step returned a tuple, not the loss tensor: return the loss alone"):
        trainer.train_step(trainer.to_device(next(trainer.batches())))


def test_fixed_effective_batch_accumulates_micro_batches_before_each_step():
    trainer = _trainer(effective_batch_size=32)
    assert trainer.accumulation_steps == 4
    assert _optimizer_steps(trainer, 8) == 2


def test_free_batch_steps_every_batch():
    trainer = _trainer()
    assert trainer.accumulation_steps == 1
    assert _optimizer_steps(trainer, 3) == 3


def test_accumulated_micro_batches_give_the_gradient_of_the_whole_batch():
    torch.manual_seed(0)
    whole = _trainer()
    torch.manual_seed(0)
    micro = _trainer(effective_batch_size=8, batch_size=4)
    batch = whole.to_device(next(whole.batches()))
    inputs, targets = batch
    for part in ((inputs[:4], targets[:4]), (inputs[4:], targets[4:])):
        micro.train_step(part)
    whole.train_step(batch)
    for a, b in zip(whole.pipeline.model.parameters(), micro.pipeline.model.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6)


def test_zero_grad_keeps_gradients_when_set_to_none_is_false():
    trainer = _trainer(set_to_none=False)
    trainer.train_step(trainer.to_device(next(trainer.batches())))
    assert all(p.grad is not None and not p.grad.any() for p in trainer.pipeline.model.parameters())
    trainer = _trainer()
    trainer.train_step(trainer.to_device(next(trainer.batches())))
    assert all(p.grad is None for p in trainer.pipeline.model.parameters())


def test_optimizer_impl_reaches_the_optimizer():
    assert _trainer(optimizer_impl="foreach").optimizer.defaults["foreach"] is True
    assert _trainer(optimizer_impl="fused").optimizer.defaults["fused"] is True


@pytest.mark.parametrize(
    ("loss", "reference", "problem"),
    [
        (1.0, None, None),
        (math.nan, None, "not a finite number"),
        (math.inf, 1.0, "not a finite number"),
        (1.04, 1.0, None),
        (1.2, 1.0, "differs from the fp32 eager loss 1 by 0.2 (relative), more than measure.loss_tolerance=0.05"),
    ],
)
def test_loss_problem(loss, reference, problem):
    found = loss_problem(loss, reference, 0.05)
    assert found == problem if problem is None else problem in found


@pytest.mark.parametrize(
    ("loss", "spread", "problem"),
    [
        (1.2, 0.2, None),  # 0.05 of the reference and the 0.2 its draws ranged over: 0.25
        (0.76, 0.2, None),
        (1.3, 0.2, "by 0.3 (relative), more than measure.loss_tolerance=0.05 beyond the 0.2 the loss's own random"),
        (1.06, 0.0, "by 0.06 (relative)"),  # the draws of a loss that draws random numbers came out the same
    ],
)
def test_a_loss_that_draws_random_numbers_may_differ_by_their_range_beyond_the_tolerance(loss, spread, problem):
    found = loss_problem(loss, 1.0, 0.05, spread)
    assert found == problem if problem is None else problem in found


def test_the_reference_loss_is_one_fp32_step_where_the_loss_draws_no_random_numbers():
    trainer = _trainer()
    batch = trainer.to_device(next(trainer.batches()))
    reference = trainer.reference_loss(batch, 0, redrawn=True)
    assert reference.spread is None
    assert reference.loss == trainer._fp32_eager_loss(batch)


def test_the_reference_loss_of_a_loss_that_draws_random_numbers_for_a_step_that_draws_others_is_over_its_seeds():
    trainer = _trainer(model="tiny.NoisyCNN")
    batch = trainer.to_device(next(trainer.batches()))
    losses = []
    for seed in range(3, 3 + REFERENCE_SEEDS):
        torch.manual_seed(seed)
        losses.append(trainer._fp32_eager_loss(batch))
    reference = trainer.reference_loss(batch, 3, redrawn=True)
    assert reference.loss == pytest.approx(sum(losses) / len(losses))
    assert reference.spread == pytest.approx(max(losses) - min(losses)) and reference.spread > 0.1 * reference.loss
    same_draws = trainer.reference_loss(batch, 3)  # a step that draws the same numbers (amp): its seed's own loss
    assert same_draws.spread is None and same_draws.loss == losses[0]


def test_optimizer_options_follow_the_constructor():
    sgd = functools.partial(torch.optim.SGD, lr=0.1)
    assert optimizer_facts(sgd, "cpu").options == {"for_loop", "foreach", "fused"}
    assert optimizer_facts(functools.partial(torch.optim.RMSprop, lr=0.1), "cpu").options == {"for_loop", "foreach"}
    assert optimizer_facts(functools.partial(torch.optim.LBFGS, lr=0.1), "cpu").options == frozenset()
    for chosen in ({"fused": True}, {"foreach": False}):  # the config chose the implementation: not a knob's
        assert optimizer_facts(functools.partial(torch.optim.AdamW, lr=0.1, **chosen), "cpu").options == frozenset()


def test_an_implementation_the_optimizer_refuses_here_is_not_offered():
    # torch refuses foreach with a tensor lr (capturable=False) when the optimizer is built: every trial of it would
    # fail. fused with a tensor lr runs on a CPU, so it stays.
    tensor_lr = functools.partial(torch.optim.Adam, lr=torch.tensor(0.01))
    assert optimizer_facts(tensor_lr, "cpu").options == {"for_loop", "fused"}, "foreach=False runs: the loop stays"


class _RefusesSmallTensors(torch.optim.Adam):
    """A step that refuses the inspection's one-element test parameters, whatever the implementation."""

    def step(self, closure=None):
        if any(p.numel() < 4 for group in self.param_groups for p in group["params"]):
            raise ValueError("too small")
        return super().step(closure)


class _NoGroups(torch.optim.Optimizer):
    """A wrapper with no param_groups of its own: the test parameters' gradients must be set on them directly."""

    def __init__(self, params, foreach=None, fused=None):
        self.params, self.fused = list(params), fused
        if fused:
            raise RuntimeError("no fused kernels here")

    def step(self, closure=None):
        for p in self.params:
            p.data.add_(p.grad)  # a gradient of None would raise: the test parameters' own must be set

    def zero_grad(self, set_to_none=True):
        pass


def test_what_the_optimizer_accepts_stands_where_its_default_does_not_step_on_the_test_parameters():
    # Its default refuses the inspection's parameters too: a refusal says nothing of foreach or fused, a trial tells.
    refusing = functools.partial(_RefusesSmallTensors, lr=0.1)
    assert optimizer_facts(refusing, "cpu").options == {"for_loop", "foreach", "fused"}
    # Stepped on the test parameters themselves: fused refused, the rest run.
    assert optimizer_facts(_NoGroups, "cpu").options == {"for_loop", "foreach"}


@pytest.mark.parametrize("persistent", [True, False])
def test_one_dataloader_serves_every_epoch_so_persistent_workers_persist(persistent):
    spec = trial_request().pipeline
    spec = type(spec)(
        spec.name, {**spec.components, "dataset": {"_target_": "tests.fixtures.tiny.PidImages", "length": 16}}
    )
    knobs = {**NEUTRAL_KNOBS, "batch_size": 4, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": persistent}
    trainer = Trainer(build_pipeline(spec), knobs, torch.device("cpu"))
    batches = trainer.batches()
    try:
        epochs = [{pid for _ in range(4) for pid in next(batches)[1].tolist()} for _ in range(4)]
    finally:
        batches.close()
    assert all(len(pids) == 2 for pids in epochs), "two workers serve each 4-batch epoch"
    if persistent:
        assert epochs[0] == epochs[1] == epochs[2] == epochs[3], "the same two workers across four epochs"
    else:
        assert len(set().union(*epochs)) == 8, "without persistent_workers, each epoch starts two new workers"


@pytest.mark.parametrize("exitcode, name", [(-9, "SIGKILL"), (-35, "signal 35"), (0, None)])
def test_a_dataloader_worker_killed_by_any_signal_is_named_by_it(exitcode, name):
    # A POSIX timer's real-time signal has no name in Python's signal module: naming it must not raise.
    epoch = SimpleNamespace(_workers=[SimpleNamespace(exitcode=None), SimpleNamespace(exitcode=exitcode)])
    found = _worker_kill_signal(epoch)
    assert found == name if name is None else found.startswith(name)  # then the C library's description


def _with(component: str, node: dict):
    request = trial_request()
    return replace(request.pipeline, components={**request.pipeline.components, component: node})


@pytest.mark.parametrize(
    ("component", "node", "message"),
    [
        (
            "dataset",
            {"_target_": "tests.fixtures.inspection.NoLength"},
            "len() of NoLength failed (object of type 'NoLength' has no len()): autotune needs a map-style Dataset "
            "(__getitem__ and __len__) or an IterableDataset",
        ),
        (
            "model",
            {"_target_": "tests.fixtures.inspection.NeedsHidden"},
            "tests.fixtures.inspection.NeedsHidden needs an argument the config does not give (add it under the "
            "component): missing a required argument: 'hidden'",
        ),
    ],
)
def test_a_component_that_cannot_be_built_as_configured_is_refused_before_any_trial(component, node, message):
    with pytest.raises(ConfigError) as refused:
        inspect_pipeline(_with(component, node))
    assert str(refused.value).startswith(f"pipeline.{component}: ") and message in str(refused.value)
    inspect_pipeline(_with("model", {"_target_": "tests.fixtures.inspection.NeedsHidden", "hidden": 3}))
    inspect_pipeline(_with("model", {"_target_": "tests.fixtures.inspection.build_with_hidden"}))  # its decorator's


def test_a_model_target_that_builds_no_module_is_named_when_the_trial_builds_it():
    with pytest.raises(ConfigError, match=r"^pipeline.model: tests.fixtures.inspection.build_a_function built a "):
        build_pipeline(_with("model", {"_target_": "tests.fixtures.inspection.build_a_function"}))


def test_a_loss_that_returns_a_float_is_told_what_pipeline_loss_must_return():
    trainer = Trainer(
        build_pipeline(_with("loss", {"_target_": "tests.fixtures.inspection.float_loss"})),
        {**NEUTRAL_KNOBS, "batch_size": 8},
        torch.device("cpu"),
        None,
    )
    with pytest.raises(TypeError, match=r"^pipeline.loss returned a float, not the loss tensor"):
        trainer.train_step(trainer.to_device(next(trainer.batches())))


def broken_collate(samples: list) -> None:
    """A collate function that fails on any samples."""
    raise ValueError("my collate is broken")


class NoneSamples(torch.utils.data.Dataset):
    """A dataset whose samples are None, which PyTorch's default collate refuses."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> None:
        return None


def test_a_collate_fn_that_fails_is_named_not_the_dataset_it_read():
    with pytest.raises(ConfigError) as refused:
        inspect_pipeline(_with("collate_fn", {"_target_": f"{__name__}.broken_collate"}))
    assert str(refused.value) == (
        "pipeline.collate_fn: collating samples 0 and 1 failed: ValueError: my collate is broken"
    )
    with pytest.raises(ConfigError) as refused:  # PyTorch's own collate cannot take what the dataset returns
        inspect_pipeline(_with("dataset", {"_target_": f"{__name__}.NoneSamples"}))
    said = str(refused.value)
    assert said.startswith("pipeline.dataset: collating samples 0 and 1 failed: TypeError: default_collate")
    assert said.endswith(
        "; PyTorch's default collate cannot batch its samples: give pipeline.collate_fn, a function that collates a "
        "list of samples into a batch"
    )


def even_collate(samples: list):
    """PyTorch's default collate of an even batch alone, as timm's Mixup mixes each sample with its mirror."""
    if len(samples) % 2:
        raise ValueError("Batch size should be even when using this")
    return torch.utils.data.default_collate(samples)


@pytest.mark.parametrize(
    "dataset",
    [{"_target_": "tests.fixtures.tiny.TinyImages"}, {"_target_": "tests.fixtures.streams.SplitStream"}],
    ids=["map-style", "stream"],
)
def test_a_collate_fn_that_needs_an_even_batch_is_inspected_on_two_samples(dataset):
    spec = _with("collate_fn", {"_target_": f"{__name__}.even_collate"})
    spec = replace(spec, components={**spec.components, "dataset": dataset})
    assert inspect_pipeline(spec).input_ndim == 4


class RaggedSamples(torch.utils.data.Dataset):
    """Sequences of different lengths, which PyTorch's default collate batches one at a time only."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.ones(index + 1), torch.tensor(0)


def test_samples_a_batch_of_one_alone_collates_are_inspected_alone_not_refused():
    # Trained at batch size 1 they run; which larger batches fail, the trials tell.
    spec = _with("dataset", {"_target_": f"{__name__}.RaggedSamples"})
    assert inspect_pipeline(spec).input_ndim == 2, "a batch of one sequence"


def test_a_dataset_of_one_sample_is_inspected_on_it_alone():
    spec = _with("dataset", {"_target_": "tests.fixtures.tiny.TinyImages", "length": 1})
    assert inspect_pipeline(spec).dataset_len == 1
    spec = _with("dataset", {"_target_": "tests.fixtures.streams.SplitStream", "length": 1})
    assert inspect_pipeline(spec).input_ndim == 4, "a stream that yields one sample"


@pytest.mark.parametrize("dataset", ["tests.fixtures.tiny.TinyImages", "tests.fixtures.profiled.InMemoryFeatures"])
def test_a_model_factory_that_builds_no_module_is_refused_at_the_inspection(dataset):
    # Whether inputs can go channels-last (4-D images) or not (2-D features): only calling the function tells.
    spec = _with("model", {"_target_": "tests.fixtures.inspection.build_a_function"})
    spec = replace(spec, components={**spec.components, "dataset": {"_target_": dataset}})
    with pytest.raises(ConfigError) as refused:
        inspect_pipeline(spec)
    assert str(refused.value) == (
        "pipeline.model: tests.fixtures.inspection.build_a_function built a builtin_function_or_method, not a "
        "torch.nn.Module: name the module's class, or a function that returns one"
    )


def per_sample_step(model, batch, loss_fn):
    """A step whose loss keeps one value a sample."""
    inputs, targets = batch
    return torch.nn.functional.cross_entropy(model(inputs), targets, reduction="none")


def counting_step(model, batch, loss_fn):
    """A step that returns the count of wrong predictions: a 0-d integer tensor."""
    inputs, targets = batch
    return (model(inputs).argmax(dim=1) != targets).sum()


def detached_step(model, batch, loss_fn):
    """A step that returns its loss detached from the graph."""
    inputs, targets = batch
    return loss_fn(model(inputs), targets).detach()


@pytest.mark.parametrize(
    ("component", "node", "message"),
    [
        (
            "loss",
            {"_target_": "torch.nn.CrossEntropyLoss", "reduction": "none"},
            "pipeline.loss returned a loss of shape (8,), not one number: reduce it to one (reduction='none' keeps "
            "a loss per sample: take their mean)",
        ),
        (
            "step",
            {"_target_": f"{__name__}.per_sample_step"},
            "pipeline.step returned a loss of shape (8,), not one number",
        ),
        (
            "step",
            {"_target_": f"{__name__}.counting_step"},
            "pipeline.step returned a loss of dtype torch.int64, not floating point: an integer tensor carries no "
            "gradient",
        ),
        (
            "step",
            {"_target_": f"{__name__}.detached_step"},
            "pipeline.step returned a loss that does not require grad: return it as computed, not detached",
        ),
    ],
)
def test_a_loss_backward_cannot_take_is_told_in_the_pipelines_words(component, node, message):
    trainer = Trainer(
        build_pipeline(_with(component, node)), {**NEUTRAL_KNOBS, "batch_size": 8}, torch.device("cpu"), None
    )
    with pytest.raises(ValueError) as refused:
        trainer.train_step(trainer.to_device(next(trainer.batches())))
    assert str(refused.value).startswith(message)
