"""Batches of every structure real clients produce reach the device with their type kept, and their samples are
counted: each type through the walker, then through a real trial and the plain loop.

Moves go to the meta device, which exists without a GPU, so a tensor that moved is told apart from one left
behind; the test marked ``needs_gpu`` moves them to CUDA (skipped here with its reason)."""

from __future__ import annotations

from collections import OrderedDict, UserDict
from dataclasses import dataclass, field, replace

import pytest
import torch
from torch.nn.utils.rnn import pack_sequence

from autotune.batches import batch_len, move, to_device
from autotune.config.load import load_settings
from autotune.errors import AutotuneError, ConfigError
from autotune.knobs import TrainingSetup
from autotune.knobs.channels_last import ChannelsLastKnob
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from autotune.pipeline.build import build_pipeline
from autotune.pipeline.inspect import inspect_pipeline
from autotune.trial.plain import run_plain
from autotune.trial.result import TrialRequest
from autotune.trial.runner import run_trial
from tests.conftest import NEUTRAL_KNOBS, tiny_config, trial_request
from tests.fixtures.batches import Pair, SelfMoving, collate_per_sample

META = torch.device("meta")
CHANNELS_LAST = torch.channels_last
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@dataclass
class Example:
    images: torch.Tensor
    labels: torch.Tensor
    note: str = "kept"
    derived: int = field(default=0, init=False)


class Recorder:
    """An object that moves itself: records each ``.to()`` call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def to(self, *args, **kwargs) -> Recorder:
        self.calls.append((args, kwargs))
        return self


def images(n: int = 4) -> torch.Tensor:
    return torch.rand(n, 3, 8, 8)


def on_meta(tensor: torch.Tensor) -> bool:
    return tensor.device.type == "meta"


def test_a_tensor_moves_and_4d_float_inputs_take_the_memory_format():
    moved = move(images(), META, memory_format=CHANNELS_LAST)
    assert on_meta(moved) and moved.is_contiguous(memory_format=CHANNELS_LAST) and not moved.is_contiguous()
    labels = move(torch.zeros(4, 3, 8, 8, dtype=torch.long), META, memory_format=CHANNELS_LAST)
    assert on_meta(labels) and labels.is_contiguous(), "integer tensors keep their layout"
    assert move(images(), META).is_contiguous(), "no layout asked: none changed"


def test_which_tensors_take_the_memory_format_is_the_channels_last_knobs_rule(monkeypatch):
    asked = []

    def takes(ndim, floating=True):
        asked.append((ndim, floating))
        return ndim == 4 and not floating  # a rule no tensor's layout follows but by asking it

    monkeypatch.setattr(ChannelsLastKnob, "takes", staticmethod(takes))
    images_moved = move(images(), META, memory_format=CHANNELS_LAST)
    labels_moved = move(torch.zeros(4, 3, 8, 8, dtype=torch.long), META, memory_format=CHANNELS_LAST)
    assert asked == [(4, True), (4, False)]
    assert images_moved.is_contiguous() and labels_moved.is_contiguous(memory_format=CHANNELS_LAST)


def test_a_userdict_keeps_its_type_and_attributes_and_the_original_is_left_as_it_was():
    batch = UserDict(pixel_values=images(), labels=torch.zeros(4))
    batch.n_sequences = 1  # BatchEncoding keeps state beside its data
    moved = move(batch, META, memory_format=CHANNELS_LAST)
    assert type(moved) is UserDict and moved.n_sequences == 1 and list(moved) == ["pixel_values", "labels"]
    assert on_meta(moved["labels"]) and moved["pixel_values"].is_contiguous(memory_format=CHANNELS_LAST)
    assert not on_meta(batch["labels"]), "the batch given is not changed (the probe moves one batch many times)"


def test_dicts_keep_their_type():
    moved = move(OrderedDict(x=images()), META)
    assert type(moved) is OrderedDict and on_meta(moved["x"])
    assert type(move({"x": images()}, META)) is dict


def test_a_namedtuple_is_rebuilt_field_by_field():
    moved = move(Pair(images(), torch.zeros(4)), META, memory_format=CHANNELS_LAST)
    assert type(moved) is Pair and on_meta(moved.labels)
    assert moved.images.is_contiguous(memory_format=CHANNELS_LAST)


def test_a_dataclass_keeps_its_type_and_its_other_fields():
    moved = move(Example(images(), torch.zeros(4)), META)
    assert type(moved) is Example and on_meta(moved.images) and on_meta(moved.labels) and moved.note == "kept"


def test_an_object_with_its_own_to_is_asked_to_move_non_blocking_only_when_the_knob_says_so():
    recorder = Recorder()
    assert move(recorder, META) is recorder
    move(recorder, META, non_blocking=True)
    assert recorder.calls == [((META,), {}), ((META,), {"non_blocking": True})]


def test_nested_combinations_move_all_the_way_down():
    recorder = Recorder()
    batch = UserDict(inputs=[Pair(images(), torch.zeros(4))], extra=(Example(images(), torch.zeros(4)), recorder))
    moved = move(batch, META, memory_format=CHANNELS_LAST)
    pair, (example, _) = moved["inputs"][0], moved["extra"]
    assert type(pair) is Pair and pair.images.is_contiguous(memory_format=CHANNELS_LAST) and on_meta(pair.labels)
    assert type(example) is Example and on_meta(example.labels)
    assert recorder.calls == [((META,), {})]


def test_values_that_are_not_tensors_stay_as_they_are():
    batch = {"ids": ["a", "b"], "length": 2, "x": images()}
    moved = move(batch, META)
    assert moved["ids"] == ["a", "b"] and moved["length"] == 2 and on_meta(moved["x"])


@pytest.mark.parametrize(
    "batch",
    [
        # Each holds a later tensor of another leading size (class weights, a vocabulary): the first one counts.
        torch.zeros(5, 3),
        (torch.zeros(5, 3), torch.zeros(10)),
        [torch.zeros(5), torch.zeros(1)],
        {"ids": ["a"], "x": torch.zeros(5, 2), "w": torch.zeros(10)},
        UserDict(input_ids=torch.zeros(5, 7, dtype=torch.long), attention_mask=torch.ones(5, 7), w=torch.zeros(10)),
        Pair(torch.zeros(5, 3, 8, 8), torch.zeros(10)),
        Example(torch.zeros(5, 3), torch.zeros(10)),
        SelfMoving(torch.zeros(5, 3), torch.zeros(10)),
        {"meta": {"scale": torch.tensor(2.0)}, "inputs": [Pair(torch.zeros(5), torch.zeros(10))]},
    ],
    ids=["tensor", "tuple", "list", "dict", "userdict", "namedtuple", "dataclass", "self-moving", "nested"],
)
def test_the_samples_are_the_leading_dimension_of_the_first_tensor(batch):
    assert batch_len(batch) == 5


def _targets(n):
    return tuple({"boxes": torch.zeros(k, 4), "labels": torch.zeros(k), "image_id": torch.tensor(k)} for k in range(n))


@pytest.mark.parametrize(
    "batch",
    [
        # collate_fn=lambda b: tuple(zip(*b)) on detection samples: images of one size or of several, target dicts.
        (tuple(torch.zeros(3, 32, 32) for _ in range(8)), _targets(8)),
        (tuple(torch.zeros(3, 20 + i, 30) for i in range(8)), _targets(8)),
        [[torch.zeros(3, 20 + i, 30) for i in range(8)], list(_targets(8))],
        # Variable-length token sequences, one tensor per sample.
        {"input_ids": [torch.zeros(n, dtype=torch.long) for n in (37, 12, 5, 9, 40, 1, 3, 22)]},
        {"input_ids": [torch.zeros(n, dtype=torch.long) for n in (37, 12, 5, 9, 40, 1, 3, 22)], "w": torch.zeros(10)},
        # Images of one size beside per-sample labels (0-d tensors): tuple(zip(*b)) on classification samples.
        (tuple(torch.zeros(3, 8, 8) for _ in range(8)), tuple(torch.tensor(i % 4) for i in range(8))),
        {"samples": [{"label": torch.tensor(1)} for _ in range(8)]},
    ],
    ids=["detection", "detection-sizes", "detection-lists", "tokens", "tokens-weights", "classes", "scalar-dicts"],
)
def test_a_nested_sequence_of_one_item_per_sample_counts_its_items(batch):
    assert batch_len(batch) == 8


def test_the_per_sample_collate_counts_its_samples():
    samples = [(torch.rand(3, 8, 8), torch.tensor(i % 4)) for i in range(8)]
    assert batch_len(collate_per_sample(samples)) == 8


@pytest.mark.parametrize(
    "batch",
    [
        [[torch.zeros(5, 3, 8, 8), torch.zeros(5, 3, 8, 8)], torch.zeros(5)],  # two views of each image, labels
        ([torch.zeros(5, 3, 8, 8)] * 2 + [torch.zeros(5, 3, 4, 4)] * 6, torch.zeros(5)),  # multi-crop
        {"views": [torch.zeros(5, 3, 8, 8), torch.zeros(5, 3, 8, 8)]},
        ((torch.zeros(5, 3), torch.zeros(5, 7)), (torch.zeros(5), torch.zeros(5, 2))),  # two inputs, two targets
        {"inputs": [torch.zeros(5, 3)], "w": torch.zeros(10)},
    ],
    ids=["views", "multi-crop", "views-only", "multi-input-output", "one-item"],
)
def test_a_nested_sequence_of_batched_tensors_counts_their_leading_dimension(batch):
    assert batch_len(batch) == 5


def test_a_packed_sequence_counts_its_sequences_not_their_steps():
    sequences = [torch.zeros(n, 4) for n in (5, 3, 2)]
    packed = pack_sequence(sequences)  # its data holds the 10 steps of the three
    assert batch_len(packed) == 3
    assert batch_len((packed, torch.zeros(3))) == 3
    assert batch_len({"text": packed}) == 3


@pytest.mark.parametrize("batch", ["text", Recorder(), {"ids": ["a", "b"]}, (torch.tensor(1.0),)])
def test_a_batch_without_a_batched_tensor_is_an_error_naming_its_type(batch):
    with pytest.raises(AutotuneError, match=f"cannot count the samples of a batch of type {type(batch).__name__}"):
        batch_len(batch)


@pytest.mark.parametrize(("collate", "takes_it"), [("pair", True), ("unpacking", True), ("userdict", False)])
def test_without_a_step_a_batch_must_unpack_into_input_and_target(collate, takes_it):
    request = trial_request()
    spec = replace(
        request.pipeline,
        components={
            **request.pipeline.components,
            "collate_fn": {"_target_": f"tests.fixtures.batches.collate_{collate}"},
        },
    )
    if takes_it:
        assert inspect_pipeline(spec).dataset_len == 256
    else:
        with pytest.raises(ConfigError, match="^pipeline.step: a batch is a UserDict of keys 'pixel_values', 'labels'"):
            inspect_pipeline(spec)


def test_the_training_setup_moves_batches_as_its_knobs_say():
    setup = TrainingSetup(torch.nn.Linear(1, 1), META, non_blocking_copy=True, input_memory_format=CHANNELS_LAST)
    recorder = Recorder()
    moved = to_device(UserDict(x=images(), y=recorder), setup)
    assert type(moved) is UserDict and moved["x"].is_contiguous(memory_format=CHANNELS_LAST) and on_meta(moved["x"])
    assert recorder.calls == [((META,), {"non_blocking": True})]


def _request_with(kind: str):
    """A trial request for the tiny pipeline whose batches are built by tests/fixtures/batches.py's ``kind``."""
    config = tiny_config()
    config["pipeline"]["collate_fn"] = {"_target_": f"tests.fixtures.batches.collate_{kind}"}
    config["pipeline"]["step"] = {"_target_": f"tests.fixtures.batches.step_{kind}"}
    settings = load_settings(config, "tiny")
    return TrialRequest(settings.pipeline, {**NEUTRAL_KNOBS, "batch_size": 16}, "cpu", settings.measure.plan, 0.1)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["userdict", "pair", "self_moving", "per_sample"])
def test_a_trial_counts_the_batch_size_of_each_batch_whatever_its_structure(kind, tmp_path):
    result = run_trial(_request_with(kind), 120, tmp_path, kind)
    assert result.ok, result.failure
    assert result.timing.steps >= 3 and result.timing.samples == 16 * result.timing.steps


@pytest.mark.slow
def test_the_plain_loop_moves_a_batch_that_moves_itself():
    request = _request_with("self_moving")
    plan = WindowPlan(min_steps=3, min_time_s=0.0, max_time_s=10.0, warmup=WarmupPolicy(min_steps=2))
    run = run_plain(build_pipeline(request.pipeline), request.knobs, torch.device("cpu"), plan, None)
    assert run.steps >= 3 and run.samples == 16 * run.steps


@needs_gpu
def test_every_batch_type_reaches_the_gpu_from_pinned_memory():
    cuda = torch.device("cuda")
    pinned = images().pin_memory()
    batch = UserDict(
        pair=Pair(pinned, torch.zeros(4).pin_memory()),
        example=Example(pinned, torch.zeros(4)),
        own=SelfMoving(pinned, torch.zeros(4)),
    )
    moved = move(batch, cuda, non_blocking=True, memory_format=CHANNELS_LAST)
    torch.cuda.synchronize()
    pair, example, own = moved["pair"], moved["example"], moved["own"]
    assert type(moved) is UserDict and type(pair) is Pair and type(example) is Example and own.moved_to == cuda
    assert all(t.is_cuda for t in (pair.images, pair.labels, example.images, example.labels, own.images, own.labels))
    assert pair.images.is_contiguous(memory_format=CHANNELS_LAST)
    assert batch_len(moved) == 4
