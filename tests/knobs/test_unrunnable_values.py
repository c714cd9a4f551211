"""Which knob values cannot run here is each knob's fact (``Knob.unavailable_reason``), apart from those that run but
gain nothing (``Knob.wasteful_reason``): a recommendation (``unrunnable``) and a baseline (``check_baseline``) are
refused for the first alone, and the search space leaves out both."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.runner import unrunnable
from autotune.study.space import build_space, check_baseline
from tests.conftest import NEUTRAL_KNOBS, cpu_context

REFUSED = "required rank 4 tensor to use channels_last format"  # what torch raises for a Conv3d's weight
CPU_FACTS = Inspection(
    DeviceFacts(),
    "cpu",
    PipelineFacts(256, 4, optimizer_options=frozenset({"for_loop", "foreach"})),
    machine={"cpu_count": 2, "torch_threads": 2},
)


def _recommendation(**changes) -> dict:
    """The tiny pipeline's baseline (batch 16) with ``changes``."""
    return {**NEUTRAL_KNOBS, "batch_size": 16, **changes}


@pytest.fixture
def not_glibc(monkeypatch):
    """This Python as one on musl or macOS: malloc=keep's mallopt thresholds are glibc's."""
    monkeypatch.setattr("autotune.knobs.malloc.platform.libc_ver", lambda: ("", ""))


def test_a_recommendation_whose_model_refuses_channels_last_is_unrunnable(tiny_settings):
    refused = replace(CPU_FACTS, pipeline=replace(CPU_FACTS.pipeline, channels_last_refused=REFUSED))
    assert unrunnable(tiny_settings, refused, _recommendation(channels_last=True)) == (
        "channels_last",
        f"the model cannot be converted to channels_last: {REFUSED}",
    )
    assert unrunnable(tiny_settings, CPU_FACTS, _recommendation(channels_last=True)) is None, "a model that converts"


def test_a_recommendation_with_an_implementation_the_optimizer_does_not_take_is_unrunnable(tiny_settings):
    name, reason = unrunnable(tiny_settings, CPU_FACTS, _recommendation(optimizer_impl="fused"))
    assert (name, "fused=True" in reason) == ("optimizer_impl", True)
    assert unrunnable(tiny_settings, CPU_FACTS, _recommendation(optimizer_impl="foreach")) is None


def test_a_recommendation_to_keep_memory_off_glibc_is_unrunnable(tiny_settings, not_glibc):
    name, reason = unrunnable(tiny_settings, CPU_FACTS, _recommendation(malloc="keep"))
    assert (name, reason) == ("malloc", "malloc=keep tunes glibc's allocator; this Python does not run on glibc")


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"pin_memory": True}, "pin_memory"),
        ({"cudnn_benchmark": True}, "cudnn_benchmark"),
        ({"amp": "fp16"}, "amp"),
    ],
)
def test_a_recommendation_that_runs_but_gains_nothing_on_a_cpu_is_measured(tiny_settings, changes, name):
    assert unrunnable(tiny_settings, CPU_FACTS, _recommendation(**changes)) is None, "it runs: measured as it is"
    ctx = cpu_context()
    value = changes[name]
    assert KNOBS[name].unavailable_reason(value, ctx) is None and KNOBS[name].wasteful_reason(value, ctx)


def test_a_baseline_batch_larger_than_the_dataset_is_refused_saying_what_to_set():
    ctx = cpu_context(dataset_len=10)
    with pytest.raises(ConfigError) as error:
        check_baseline(ctx.baseline, ctx)
    assert str(error.value) == (
        "pipeline.baseline.batch_size: 32 cannot run here: it is larger than the dataset (10 samples), so no full "
        "batch exists; give it a value that runs here"
    )


def test_a_baseline_with_workers_that_repeat_a_stream_is_refused_saying_what_to_set():
    repeated = cpu_context(dataset_len=None, repeats_in_workers=True)
    with pytest.raises(ConfigError) as error:
        check_baseline({**NEUTRAL_KNOBS, "num_workers": 2}, repeated)
    assert error.value.key == "pipeline.baseline.num_workers"
    assert error.value.problem.startswith(
        "2 cannot run here: the dataset, an IterableDataset, gives every DataLoader worker the same samples, so 2 "
        "workers would train on each sample 2 times an epoch, where 0 or 1 read it once; split the stream across "
        "workers by torch.utils.data.get_worker_info()"
    )
    check_baseline({**NEUTRAL_KNOBS, "num_workers": 1}, repeated)


@pytest.mark.parametrize(
    ("changes", "ctx_changes", "key"),
    [
        ({"channels_last": True}, {"channels_last_refused": REFUSED}, "channels_last"),
        ({"optimizer_impl": "fused"}, {"optimizer_options": frozenset({"foreach"})}, "optimizer_impl"),
    ],
)
def test_a_baseline_value_its_knob_says_cannot_run_here_is_refused_naming_the_key(changes, ctx_changes, key):
    baseline = {**NEUTRAL_KNOBS, **changes}
    with pytest.raises(ConfigError, match=f"^pipeline.baseline.{key}: .* cannot run here: "):
        check_baseline(baseline, cpu_context(baseline=baseline, **ctx_changes))


@pytest.mark.parametrize("changes", [{"pin_memory": True}, {"cudnn_benchmark": True}, {"amp": "fp16"}])
def test_a_baseline_value_that_runs_but_gains_nothing_here_is_measured(changes):
    baseline = {**NEUTRAL_KNOBS, **changes}
    check_baseline(baseline, cpu_context(baseline=baseline))


def test_the_space_leaves_out_what_runs_but_gains_nothing_as_before():
    """On a CPU with 2-D input: the same candidates as when these values were said not to run (a user's list that
    gives one is refused as not worth a trial), the values left out each with a reason to waste no trial on them."""
    ctx = cpu_context(input_ndim=2)
    candidates = build_space(dict.fromkeys(KNOBS), ctx).candidates
    left_out = {"pin_memory": True, "cudnn_benchmark": True, "channels_last": True, "amp": "fp16"}
    for name, value in left_out.items():
        assert value not in candidates[name], name
        assert KNOBS[name].unavailable_reason(value, ctx) is None and KNOBS[name].wasteful_reason(value, ctx), name
    assert candidates["amp"] == ["off", "bf16"]
    gpu = cpu_context(device="cuda", bf16_supported=False)
    assert build_space(dict.fromkeys(KNOBS), gpu).candidates["amp"] == ["off", "fp16"], "bf16 emulated: slower"
    assert KNOBS["amp"].wasteful_reason("bf16", gpu) and KNOBS["amp"].unavailable_reason("bf16", gpu) is None
    with pytest.raises(ConfigError, match=r"^search.pin_memory: True is not worth a trial here: pinned memory only"):
        build_space({**dict.fromkeys(KNOBS), "pin_memory": [True]}, ctx)


def test_a_baseline_implementation_where_the_optimizers_config_sets_its_own_says_to_leave_it_unset():
    # The inspection reads no options where the config sets foreach or fused itself: the config's is the implementation.
    baseline = {**NEUTRAL_KNOBS, "optimizer_impl": "foreach"}
    with pytest.raises(ConfigError, match=r"its config sets foreach or fused itself .*leave optimizer_impl unset"):
        check_baseline(baseline, cpu_context(baseline=baseline, optimizer_options=frozenset()))
