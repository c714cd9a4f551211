"""Search-space defaults derived from the machine and pipeline, and user overrides."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import optuna
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.runner import unrunnable
from autotune.study.space import build_space, check_baseline
from tests.conftest import NEUTRAL_KNOBS, cpu_context

ALL_DEFAULT = dict.fromkeys(KNOBS)
WORKERS_AND_OPTIONS = ("num_workers", "prefetch_factor", "persistent_workers")


def expected_size(space) -> int:
    """Batch sizes x (no workers, or each worker count with every worker option) x every other knob's values."""
    c = space.candidates
    workers = sum(1 if w == 0 else len(c["prefetch_factor"]) * len(c["persistent_workers"]) for w in c["num_workers"])
    others = math.prod(len(v) for k, v in c.items() if k not in ("batch_size", *WORKERS_AND_OPTIONS))
    return len(c["batch_size"]) * workers * others


def test_defaults_on_a_two_core_cpu_with_image_input():
    space = build_space(ALL_DEFAULT, cpu_context())
    expected = {
        "batch_size": [16, 32, 64, 128],
        "num_workers": [0, 1, 2, 4],
        "prefetch_factor": [2, 4],
        "persistent_workers": [False, True],
        "pin_memory": [False],
        "num_threads": [1, 2],
        "channels_last": [False, True],
        "amp": ["off", "bf16"],
        "compile": ["off", "default"],
        "cudnn_benchmark": [False],
        "optimizer_impl": ["default", "foreach", "fused"],
        "set_to_none": [True, False],
    }
    assert {name: space.candidates[name] for name in expected} == expected
    assert space.size == expected_size(space), "no worker options with num_workers=0"


def test_defaults_on_a_gpu_offer_pinned_memory_and_fp16():
    space = build_space(ALL_DEFAULT, cpu_context(device="cuda", bf16_supported=False))
    assert space.candidates["pin_memory"] == [False, True]
    assert space.candidates["amp"] == ["off", "fp16"]
    assert "reduce-overhead" in space.candidates["compile"]


def test_reduce_overhead_on_a_cpu_is_default_one_candidate_spelled_as_the_baseline_spells_it():
    given = {**ALL_DEFAULT, "compile": ["off", "default", "reduce-overhead"]}
    assert build_space(given, cpu_context()).candidates["compile"] == ["off", "default"], "no CUDA graphs to replay"
    graphs = {**NEUTRAL_KNOBS, "compile": "reduce-overhead"}
    assert build_space(given, cpu_context(baseline=graphs)).candidates["compile"] == ["off", "reduce-overhead"]
    on_gpu = build_space(given, cpu_context(device="cuda")).candidates["compile"]
    assert on_gpu == ["off", "default", "reduce-overhead"]


def test_cuda_graph_modes_conflict_with_gradients_kept_across_steps_on_a_gpu_alone():
    kept = {**NEUTRAL_KNOBS, "compile": "max-autotune", "set_to_none": False}
    check_baseline(kept, cpu_context(baseline=kept))  # a CPU replays no CUDA graph: max-autotune runs beside it
    with pytest.raises(ConfigError, match=r"^pipeline.baseline.compile: CUDA graphs \(compile=max-autotune\)"):
        check_baseline(kept, cpu_context(device="cuda", baseline=kept))
    given = {**ALL_DEFAULT, "compile": ["max-autotune"], "set_to_none": [False]}
    assert build_space(given, cpu_context()).size > 0
    with pytest.raises(ConfigError, match="^search.compile: 'max-autotune' runs in no configuration"):
        build_space(given, cpu_context(device="cuda"))


def test_a_recommendation_with_cuda_graph_modes_and_gradients_kept_runs_on_a_cpu_alone(tiny_settings):
    kept = {**NEUTRAL_KNOBS, "batch_size": 16, "compile": "max-autotune", "set_to_none": False}
    cpu = Inspection(DeviceFacts(), "cpu", PipelineFacts(256, 4), machine={"cpu_count": 2, "torch_threads": 2})
    assert unrunnable(tiny_settings, cpu, kept) is None
    gpu = replace(cpu, devices=DeviceFacts(("a GPU",)), device="cuda:0")
    assert unrunnable(tiny_settings, gpu, kept)[0] == "compile"


def test_channels_last_only_for_4d_input():
    assert build_space(ALL_DEFAULT, cpu_context(input_ndim=2)).candidates["channels_last"] == [False]


def test_batch_sizes_fit_the_dataset_and_keep_an_odd_baseline():
    ctx = cpu_context(dataset_len=100, baseline={**cpu_context().baseline, "batch_size": 48})
    assert build_space(ALL_DEFAULT, ctx).candidates["batch_size"] == [32, 48, 64]


def test_num_workers_follow_the_core_count():
    assert build_space(ALL_DEFAULT, cpu_context(cpu_count=4)).candidates["num_workers"] == [0, 1, 2, 3, 4, 8]
    assert build_space(ALL_DEFAULT, cpu_context(cpu_count=2)).candidates["num_workers"] == [0, 1, 2, 4]


def test_many_cores_get_a_ladder_of_worker_counts_with_the_baseline_the_core_count_and_twice_it():
    many = cpu_context(cpu_count=20, baseline={**cpu_context().baseline, "num_workers": 10})
    assert build_space(ALL_DEFAULT, many).candidates["num_workers"] == [0, 1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 40]
    huge = build_space(ALL_DEFAULT, cpu_context(cpu_count=64)).candidates["num_workers"]
    assert huge[-2:] == [64, 96], "at most 32 workers beyond the cores"


def test_overrides_replace_defaults_and_a_single_value_fixes_a_knob():
    space = build_space({**ALL_DEFAULT, "batch_size": [8, 256], "compile": ["off"]}, cpu_context())
    assert space.candidates["batch_size"] == [8, 256]
    assert "compile" not in space.varied and "batch_size" in space.varied


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"pin_memory": [True]}, "search.pin_memory: True is not worth a trial here"),
        ({"amp": ["fp16"]}, "search.amp: 'fp16' is not worth a trial here"),
        ({"batch_size": [5000]}, "search.batch_size: 5000 cannot run here"),
        (
            {"num_workers": [0], "prefetch_factor": [4]},
            "search.prefetch_factor: only applies with num_workers > 0, which no configuration of the search space",
        ),
    ],
)
def test_overrides_that_cannot_run_here_are_config_errors(override, message):
    with pytest.raises(ConfigError, match=message):
        build_space({**ALL_DEFAULT, **override}, cpu_context())


def test_a_baseline_batch_larger_than_the_dataset_is_rejected():
    ctx = cpu_context(dataset_len=10)
    with pytest.raises(ConfigError, match="pipeline.baseline.batch_size"):
        check_baseline(ctx.baseline, ctx)


def test_contains_knows_which_knobs_apply():
    space = build_space(ALL_DEFAULT, cpu_context())
    knobs = {**NEUTRAL_KNOBS, "batch_size": 64, "num_threads": 1}
    assert space.contains(knobs)
    assert not space.contains({**knobs, "batch_size": 7})
    assert not space.contains({**knobs, "prefetch_factor": 4}), "no prefetching without workers"
    with_workers = {**knobs, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}
    assert space.contains(with_workers)
    assert not space.contains({**with_workers, "prefetch_factor": None})


def test_configurations_are_distinct_and_all_contained():
    space = build_space({**ALL_DEFAULT, "batch_size": [32], "optimizer_impl": ["default"]}, cpu_context())
    configurations = list(space.configurations())
    keys = {tuple(sorted(c.items(), key=str)) for c in configurations}
    assert len(keys) == len(configurations) == space.size
    assert all(space.contains(c) for c in configurations)


def test_a_draw_is_a_configuration_of_the_space_and_draws_reach_all_of_a_small_one():
    space = build_space({**ALL_DEFAULT, "batch_size": [32], "optimizer_impl": ["default"]}, cpu_context())
    rng = random.Random(0)
    drawn = [knobs for knobs in (space.draw(rng) for _ in range(40 * space.size)) if knobs is not None]
    assert all(space.contains(knobs) for knobs in drawn)
    assert {tuple(sorted(k.items(), key=str)) for k in drawn} == {
        tuple(sorted(k.items(), key=str)) for k in space.configurations()
    }


def test_sampling_is_define_by_run_and_never_proposes_what_cannot_run(tmp_path):
    space = build_space(ALL_DEFAULT, cpu_context())
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    for _ in range(60):
        trial = study.ask()
        knobs = space.sample(trial)
        assert space.contains(knobs)
        if knobs["num_workers"] == 0:
            assert "prefetch_factor" not in trial.params and "persistent_workers" not in trial.params
        assert not ({"pin_memory", "cudnn_benchmark"} & set(trial.params)), "fixed knobs are not sampled"
        study.tell(trial, 1.0)


@given(st.lists(st.integers(min_value=-5, max_value=1500), min_size=1, max_size=6))
def test_any_batch_size_list_is_kept_or_refused_naming_the_value(values):
    ctx = cpu_context(dataset_len=1000)
    search = {**ALL_DEFAULT, "batch_size": values}
    too_big = [v for v in values if v > 1000]
    if too_big:
        with pytest.raises(ConfigError, match=f"^search.batch_size: {too_big[0]} cannot run here"):
            build_space(search, ctx)
    else:
        space = build_space(search, ctx)
        assert space.candidates["batch_size"] == list(dict.fromkeys(values)), "in order, each once"
        assert space.size == expected_size(space)


@pytest.mark.parametrize(
    ("name", "values", "refused"),
    [
        ("num_threads", [1, 2, 8, 9], "9 threads on the 2 cores trials run on is more than 4 a core"),
        ("num_workers", [0, 8, 9], "9 workers on the 2 cores trials run on is more than 4 a core"),
    ],
)
def test_values_that_run_but_only_waste_trials_here_are_refused_naming_the_key(name, values, refused):
    with pytest.raises(ConfigError, match=f"^search.{name}: {values[-1]} is not worth a trial here: {refused}"):
        build_space({**ALL_DEFAULT, name: values}, cpu_context(cpu_count=2))
    assert build_space({**ALL_DEFAULT, name: values[:-1]}, cpu_context(cpu_count=2)).candidates[name] == values[:-1]
    own = cpu_context(cpu_count=2, baseline={**NEUTRAL_KNOBS, name: values[-1]})  # what the user runs today
    assert build_space({**ALL_DEFAULT, name: values}, own).candidates[name] == values, "the baseline's own is measured"


@st.composite
def contexts(draw) -> object:
    """A machine and a pipeline such as a user brings: any device, core count, dataset, input and baseline batch."""
    batch = draw(st.integers(1, 512))
    cores = draw(st.integers(1, 256))
    return cpu_context(
        device=draw(st.sampled_from(["cpu", "cuda"])),
        cpu_count=cores,
        bf16_supported=draw(st.booleans()),
        dataset_len=draw(st.integers(batch, 100_000)),  # the baseline's batch fits, as check_baseline requires
        input_ndim=draw(st.sampled_from([None, 1, 2, 3, 4, 5])),
        baseline={**NEUTRAL_KNOBS, "batch_size": batch},
        optimizer_options=draw(st.sets(st.sampled_from(["foreach", "fused"])).map(frozenset)),
        batch_policy=draw(st.sampled_from(["free", "fixed_effective"])),
        torch_threads=draw(st.none() | st.integers(1, cores)),
    )


@given(contexts())
def test_defaults_always_yield_a_runnable_nonempty_space(ctx):
    space = build_space(ALL_DEFAULT, ctx)
    assert all(space.candidates.values())
    for name, values in space.candidates.items():
        assert all(KNOBS[name].unavailable_reason(v, ctx) is None for v in values), name


@pytest.mark.parametrize("name", ["pin_memory", "cudnn_benchmark"])
def test_a_gpu_only_setting_a_cpu_baseline_turns_on_is_kept_not_recommended_off(name):
    # Many scripts set pin_memory=True whatever the device: on a CPU it does nothing, so False is no change.
    ctx = cpu_context(baseline={**NEUTRAL_KNOBS, name: True})
    assert build_space(ALL_DEFAULT, ctx).candidates[name] == [True]
    on_gpu = cpu_context(device="cuda", baseline={**NEUTRAL_KNOBS, name: True})
    assert build_space(ALL_DEFAULT, on_gpu).candidates[name] == [False, True]


def test_pin_memory_on_a_cpu_model_beside_a_visible_gpu_pins_so_turning_it_off_is_a_change():
    ctx = cpu_context(gpu_visible=True, baseline={**NEUTRAL_KNOBS, "pin_memory": True})
    assert build_space(ALL_DEFAULT, ctx).candidates["pin_memory"] == [False]


@pytest.mark.parametrize("cores, expected", [(1, [1]), (6, [1, 2, 4, 6]), (256, [1, 2, 4, 8, 16, 32, 64, 128, 256])])
def test_thread_counts_are_the_powers_of_two_up_to_the_cores_and_the_core_count(cores, expected):
    assert KNOBS["num_threads"].default_candidates(cpu_context(cpu_count=cores)) == expected


def test_a_value_that_means_the_baseline_is_spelled_as_the_baseline():
    """With torch starting 2 threads, num_threads=2 is the baseline's null: one candidate, not a change."""
    ctx = cpu_context(torch_threads=2, baseline={**NEUTRAL_KNOBS, "num_threads": None})
    assert build_space(ALL_DEFAULT, ctx).candidates["num_threads"] == [1, None]
    explicit = cpu_context(torch_threads=2, baseline={**NEUTRAL_KNOBS, "num_threads": 2})
    assert build_space(ALL_DEFAULT, explicit).candidates["num_threads"] == [1, 2]
    given = {**ALL_DEFAULT, "num_threads": [None, 1, 2]}
    assert build_space(given, ctx).candidates["num_threads"] == [None, 1]


def test_the_optimizers_default_is_not_offered_again_under_its_own_name():
    """PyTorch's default is foreach for CUDA parameters, the loop otherwise."""
    gpu = cpu_context(device="cuda")
    assert build_space(ALL_DEFAULT, gpu).candidates["optimizer_impl"] == ["default", "fused"]
    loop = {**ALL_DEFAULT, "optimizer_impl": ["default", "for_loop", "foreach"]}
    assert build_space(loop, cpu_context()).candidates["optimizer_impl"] == ["default", "foreach"]
