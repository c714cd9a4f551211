"""The knob contract, checked for every registered knob, and each knob's apply step."""

from __future__ import annotations

import copy

import pytest
import torch

from autotune.knobs import (
    COMPUTE_KNOBS,
    KNOBS,
    LOADER_KNOBS,
    REQUIRED,
    UNTIMED_KNOBS,
    WORKER_OPTIONS,
    Role,
    Target,
    TrainingSetup,
    apply_knobs,
    changed,
    changes_numerics,
    costly,
    malloc,
    redraws_random,
)
from tests.conftest import NEUTRAL_KNOBS, cpu_context

EXAMPLE_VALUES = {
    "num_threads": 1,
    "batch_size": 64,
    "num_workers": 2,
    "prefetch_factor": 4,
    "persistent_workers": True,
    "pin_memory": True,
    "channels_last": True,
    "amp": "bf16",
    "compile": "default",
    "cudnn_benchmark": True,
    "optimizer_impl": "fused",
    "set_to_none": False,
    "malloc": "keep",
}
NEUTRAL = NEUTRAL_KNOBS


def _setup() -> TrainingSetup:
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten())
    return TrainingSetup(model=model, device=torch.device("cpu"))


def _model_state(model: torch.nn.Module) -> list[tuple]:
    """What a knob may change of a model in place: each parameter's and buffer's dtype, device and strides."""
    tensors = [*model.parameters(), *model.buffers()]
    return [(tensor.dtype, tensor.device, tensor.stride()) for tensor in tensors]


@pytest.mark.parametrize("name", list(KNOBS))
def test_knob_contract(name):
    knob = KNOBS[name]
    ctx = cpu_context()
    assert knob.name == name and knob.description
    candidates = knob.default_candidates(ctx)
    assert candidates, "every knob proposes at least one value"
    assert [knob.parse(v) for v in candidates] == candidates, "candidates are canonical"
    if NEUTRAL[name] is not None:
        assert knob.unavailable_reason(NEUTRAL[name], ctx) is None, "the neutral value always runs"
    assert knob.parse(EXAMPLE_VALUES[name]) == EXAMPLE_VALUES[name]
    with pytest.raises(ValueError):
        knob.parse("nonsense-value")
    assert isinstance(knob.role, Role), "how the search treats it"
    if knob.baseline_default is not REQUIRED:
        assert knob.parse(knob.baseline_default) == knob.baseline_default, "its baseline default is a value"
        assert knob.unavailable_reason(knob.baseline_default, ctx) is None, "that runs anywhere"
    if knob.role is Role.WORKER_OPTION:
        assert knob.parse(knob.preferred) == knob.preferred, "the value steered configurations take"
    assert isinstance(knob.costly, bool) and isinstance(knob.changes_numerics, bool)
    assert isinstance(knob.redraws_random, bool) and (knob.changes_numerics or not knob.redraws_random)


@pytest.mark.parametrize("name", list(KNOBS))
def test_a_knob_changes_only_what_it_says_it_applies_to(name, monkeypatch):
    """``applies_to`` is what a training script's Recommendation applies where: a knob writing another group's
    fields would be applied at the wrong place, or not at all."""
    monkeypatch.setattr(torch, "compile", lambda model, mode=None: torch.nn.Sequential(model))
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda _: type("libc", (), {"mallopt": staticmethod(lambda *a: 1)}))
    knob = KNOBS[name]
    assert knob.applies_to and all(isinstance(target, Target) for target in knob.applies_to)
    fields = {field for target in knob.applies_to for field in target.fields}
    setup = _setup()
    before = {field: value if field == "model" else copy.deepcopy(value) for field, value in vars(setup).items()}
    model = _model_state(setup.model)
    knob.apply(EXAMPLE_VALUES[name], setup)
    changed = {field for field, value in before.items() if field != "model" and getattr(setup, field) != value}
    if setup.model is not before["model"] or _model_state(setup.model) != model:  # replaced, or changed in place
        changed.add("model")
    assert changed <= fields, f"{name} also changes {changed - fields}"
    if knob.applies_to != (Target.PROCESS,):
        assert changed, f"{name}={EXAMPLE_VALUES[name]!r} changes nothing it applies to"


def test_every_knob_takes_part_in_the_search_by_its_role():
    groups = [*LOADER_KNOBS, *COMPUTE_KNOBS, *UNTIMED_KNOBS, *WORKER_OPTIONS]
    assert sorted(groups) == sorted(KNOBS), "each knob in exactly one group"
    assert UNTIMED_KNOBS[-1] == "compile", "the costly untimed knob is tried last"


def test_the_numerics_guard_and_the_compile_time_follow_the_knobs_facts():
    assert not changes_numerics(NEUTRAL) and not costly(NEUTRAL)
    assert changes_numerics({**NEUTRAL, "amp": "bf16"}) and not costly({**NEUTRAL, "amp": "bf16"})
    assert changes_numerics({**NEUTRAL, "compile": "default"}) and costly({**NEUTRAL, "compile": "default"})
    assert redraws_random({**NEUTRAL, "compile": "default"}) and not redraws_random({**NEUTRAL, "amp": "bf16"})


def test_malloc_keep_sets_glibcs_thresholds_as_its_environment_variables_say(monkeypatch):
    calls = []

    class FakeLibc:
        @staticmethod
        def mallopt(parameter, value):
            calls.append((parameter, value))
            return 1

    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: FakeLibc)
    KNOBS["malloc"].apply("default", _setup())
    assert calls == []
    KNOBS["malloc"].apply("keep", _setup())
    assert calls == [(-3, 32 * 2**20), (-1, 2**31 - 1)]
    assert malloc.ENVIRONMENT == {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**31 - 1)}


@pytest.mark.parametrize("libc", [type("musl", (), {}), type("refusing", (), {"mallopt": staticmethod(lambda *a: 0)})])
def test_malloc_keep_where_glibc_cannot_set_it_raises_rather_than_running_without(monkeypatch, libc):
    monkeypatch.setattr(malloc.ctypes, "CDLL", lambda name: libc)
    with pytest.raises(RuntimeError, match="^malloc=keep tunes glibc's allocator, which this process does not run on"):
        KNOBS["malloc"].apply("keep", _setup())


def test_every_knob_has_an_example_and_neutral_value():
    assert set(EXAMPLE_VALUES) == set(KNOBS) == set(NEUTRAL)


def test_neutral_values_change_nothing():
    setup = _setup()
    model = setup.model
    apply_knobs(NEUTRAL, setup)
    assert setup.model is model
    assert setup.autocast_dtype is None and setup.grad_scaler is None
    assert setup.input_memory_format is None
    assert setup.loader_kwargs == {"batch_size": 32, "num_workers": 0, "pin_memory": False}
    assert setup.optimizer_kwargs == {} and setup.zero_grad_to_none


def test_loader_knobs_set_dataloader_arguments():
    setup = _setup()
    for name in ("batch_size", "num_workers", "prefetch_factor", "persistent_workers", "pin_memory"):
        KNOBS[name].apply(EXAMPLE_VALUES[name], setup)
    assert setup.loader_kwargs == {
        "batch_size": 64,
        "num_workers": 2,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "pin_memory": True,
    }
    assert setup.non_blocking_copy


def test_worker_options_apply_only_with_workers():
    for name in ("prefetch_factor", "persistent_workers"):
        assert not KNOBS[name].active({"num_workers": 0})
        assert KNOBS[name].active({"num_workers": 1})


@pytest.mark.parametrize(
    ("value", "kwargs"),
    [("default", {}), ("for_loop", {"foreach": False}), ("foreach", {"foreach": True}), ("fused", {"fused": True})],
)
def test_optimizer_impl_sets_optimizer_arguments(value, kwargs):
    setup = _setup()
    KNOBS["optimizer_impl"].apply(value, setup)
    assert setup.optimizer_kwargs == kwargs


def test_optimizer_impl_offers_only_what_the_optimizer_takes():
    knob = KNOBS["optimizer_impl"]
    assert knob.default_candidates(cpu_context()) == ["default", "foreach", "fused"]
    assert knob.resolve("default", cpu_context(device="cuda")) == "foreach", "so the space offers it once"
    assert knob.resolve("default", cpu_context()) == "for_loop"
    only_foreach = cpu_context(optimizer_options=frozenset({"for_loop", "foreach"}))
    assert knob.default_candidates(only_foreach) == ["default", "foreach"]
    assert knob.unavailable_reason("for_loop", only_foreach) is None
    assert "fused=True" in knob.unavailable_reason("fused", only_foreach)
    # foreach=True refused (a tensor lr) while foreach=False runs: the loop stays a value the user may give
    loop_only = cpu_context(optimizer_options=frozenset({"for_loop", "fused"}))
    assert knob.unavailable_reason("for_loop", loop_only) is None
    assert "foreach=True" in knob.unavailable_reason("foreach", loop_only)
    assert knob.default_candidates(cpu_context(optimizer_options=frozenset())) == ["default"]


def test_set_to_none_and_cudnn_benchmark():
    setup = _setup()
    KNOBS["set_to_none"].apply(False, setup)
    assert setup.zero_grad_to_none is False
    KNOBS["cudnn_benchmark"].apply(True, setup)  # a CPU setup: nothing to change, nothing raised
    assert "GPU" in KNOBS["cudnn_benchmark"].wasteful_reason(True, cpu_context())
    assert KNOBS["cudnn_benchmark"].default_candidates(cpu_context(device="cuda")) == [False, True]


def test_fixed_effective_batch_sizes_divide_the_baseline():
    ctx = cpu_context(batch_policy="fixed_effective", baseline={**NEUTRAL, "batch_size": 48})
    knob = KNOBS["batch_size"]
    assert knob.default_candidates(ctx) == [6, 12, 24, 48]
    assert "divide" in knob.unavailable_reason(20, ctx)
    assert "divide" in knob.unavailable_reason(96, ctx)
    assert knob.unavailable_reason(16, ctx) is None


def test_channels_last_converts_conv_weights_and_inputs():
    setup = _setup()
    KNOBS["channels_last"].apply(True, setup)
    weight = setup.model[0].weight
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    assert setup.input_memory_format is torch.channels_last


def test_amp_sets_autocast_dtype_and_scaler_for_fp16():
    setup = _setup()
    KNOBS["amp"].apply("bf16", setup)
    assert setup.autocast_dtype is torch.bfloat16 and setup.grad_scaler is None
    setup = _setup()
    KNOBS["amp"].apply("fp16", setup)
    assert setup.autocast_dtype is torch.float16 and setup.grad_scaler is not None


def test_compile_wraps_the_model():
    setup = _setup()
    original = setup.model
    KNOBS["compile"].apply("default", setup)
    assert setup.model is not original
    assert getattr(setup.model, "_orig_mod", None) is original


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("batch_size", 0),
        ("batch_size", True),
        ("num_workers", -1),
        ("pin_memory", "yes"),
        ("amp", "fp8"),
        ("compile", "fast"),
        ("prefetch_factor", 0),
        ("persistent_workers", "yes"),
        ("optimizer_impl", "apex"),
        ("set_to_none", None),
    ],
)
def test_invalid_values_are_rejected(name, value):
    with pytest.raises(ValueError, match="expected"):
        KNOBS[name].parse(value)


def test_yaml_off_read_as_false_means_off():
    assert KNOBS["amp"].parse(False) == "off"
    assert KNOBS["compile"].parse(False) == "off"


def test_applicability_on_a_cpu_machine():
    ctx = cpu_context(input_ndim=2)
    assert "GPU" in KNOBS["pin_memory"].wasteful_reason(True, ctx)
    assert "4-D" in KNOBS["channels_last"].wasteful_reason(True, ctx)
    assert KNOBS["amp"].wasteful_reason("fp16", ctx)
    assert KNOBS["amp"].wasteful_reason("bf16", ctx) is None
    assert "larger than the dataset" in KNOBS["batch_size"].unavailable_reason(2000, ctx)


def test_an_option_at_its_default_that_comes_with_workers_is_no_change_of_its_own():
    workers = {**NEUTRAL, "num_workers": 2, "prefetch_factor": 2, "persistent_workers": True}
    assert changed(workers, NEUTRAL) == {"num_workers": (0, 2), "persistent_workers": (None, True)}
    assert changed({**workers, "prefetch_factor": 4}, NEUTRAL)["prefetch_factor"] == (None, 4)
    assert changed(NEUTRAL, NEUTRAL) == {}


def test_options_that_end_with_their_workers_are_no_change_of_their_own():
    workers = {**NEUTRAL, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    assert changed(NEUTRAL, workers) == {"num_workers": (2, 0)}, "one change, not three: the tie rules count it"
    assert changed({**NEUTRAL, "num_threads": None}, {**NEUTRAL, "num_threads": 1}) == {"num_threads": (1, None)}
