"""CUDA graphs only where safe: compile=reduce-overhead never beside gradients kept across steps (set_to_none=false)
or accumulated over micro-batches (fixed_effective below the baseline's batch). The space, a user's lists and a
baseline, on a GPU context (no GPU needed: the space is plain data)."""

from __future__ import annotations

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.study.space import build_space, check_baseline, conflict
from tests.conftest import NEUTRAL_KNOBS, cpu_context, tiny_config

ALL_DEFAULT = dict.fromkeys(KNOBS)
RO = "reduce-overhead"
# A small GPU space: every knob but those under test fixed to its baseline's value.
FIXED = {name: [NEUTRAL_KNOBS[name]] for name in KNOBS if name not in ("batch_size", "compile", "set_to_none")}


def gpu_context(**changes):
    return cpu_context(device="cuda", **changes)


def unsafe(knobs, effective_batch_size=None) -> bool:
    accumulating = effective_batch_size is not None and knobs["batch_size"] < effective_batch_size
    return knobs["compile"] == RO and (knobs["set_to_none"] is False or accumulating)


def test_the_default_gpu_space_never_holds_cuda_graphs_with_gradients_kept_across_steps():
    space = build_space({**ALL_DEFAULT, **FIXED}, gpu_context())
    assert RO in space.candidates["compile"] and False in space.candidates["set_to_none"]
    configurations = list(space.configurations())
    assert not any(unsafe(knobs) for knobs in configurations)
    assert any(knobs["compile"] == RO for knobs in configurations), "with set_to_none=true it runs"
    assert space.size == len(configurations)
    assert not space.contains({**configurations[0], "compile": RO, "set_to_none": False})


def test_with_a_fixed_effective_batch_cuda_graphs_run_only_at_the_full_batch():
    ctx = gpu_context(batch_policy="fixed_effective")
    space = build_space({**ALL_DEFAULT, **FIXED}, ctx)
    assert space.candidates["batch_size"] == [4, 8, 16, 32]
    graphed = [knobs for knobs in space.configurations() if knobs["compile"] == RO]
    assert graphed and {knobs["batch_size"] for knobs in graphed} == {32}, "no micro-batch accumulates into them"


def test_a_proposal_of_the_sampler_that_conflicts_becomes_the_nearest_configuration_of_the_space():
    space = build_space({**ALL_DEFAULT, **FIXED}, gpu_context())
    proposal = {"batch_size": 32, "compile": RO, "set_to_none": False}
    knobs = space.sample(optuna.trial.FixedTrial(proposal))
    assert space.contains(knobs) and not unsafe(knobs)
    assert sum(knobs[name] != value for name, value in proposal.items()) == 1, "one knob changed"


def test_random_sampling_never_proposes_an_unsafe_configuration():
    space = build_space({**ALL_DEFAULT, **FIXED}, gpu_context(batch_policy="fixed_effective"))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(80):
        trial = study.ask()
        knobs = space.sample(trial)
        assert space.contains(knobs) and not unsafe(knobs, effective_batch_size=32)
        study.tell(trial, 1.0)


def test_a_users_list_whose_cuda_graphs_could_never_run_names_the_key():
    search = {**ALL_DEFAULT, "compile": [RO], "set_to_none": [False]}
    with pytest.raises(ConfigError, match=r"^search.compile: 'reduce-overhead' runs in no configuration") as error:
        build_space(search, gpu_context())
    assert "set_to_none=false" in str(error.value) and "\n" not in str(error.value)


def test_a_users_micro_batches_that_could_only_run_with_cuda_graphs_name_the_key():
    search = {**ALL_DEFAULT, "compile": [RO], "batch_size": [8, 32]}
    with pytest.raises(ConfigError, match=r"^search.batch_size: 8 runs in no configuration .* accumulates"):
        build_space(search, gpu_context(batch_policy="fixed_effective"))


def test_a_users_list_that_combines_them_only_in_part_keeps_what_runs():
    """Filtered, not refused: the space leaves those pairs out as it leaves out worker options without workers."""
    space = build_space({**ALL_DEFAULT, **FIXED, "compile": ["off", RO], "set_to_none": [True, False]}, gpu_context())
    pairs = {(knobs["compile"], knobs["set_to_none"]) for knobs in space.configurations()}
    assert pairs == {("off", True), ("off", False), (RO, True)}


def test_a_baseline_with_cuda_graphs_and_gradients_kept_is_refused_on_a_gpu_naming_the_key():
    baseline = {**NEUTRAL_KNOBS, "batch_size": 16, "compile": RO, "set_to_none": False}
    with pytest.raises(ConfigError, match=r"^pipeline.baseline.compile: CUDA graphs \(compile=reduce-overhead\)"):
        check_baseline(baseline, gpu_context(baseline=baseline))
    safe = {**baseline, "set_to_none": True}
    check_baseline(safe, gpu_context(baseline=safe))
    loaded = load_settings(tiny_config(pipeline={**tiny_config()["pipeline"], "baseline": baseline}), "tiny")
    assert loaded.baseline["set_to_none"] is False, "judged once the device is known: a CPU runs no graph"


def test_a_conflict_is_the_compile_knobs_and_waits_for_the_knobs_it_reads():
    chosen_so_far = {"batch_size": 8, "compile": RO}
    assert conflict(chosen_so_far, None, "cuda") is None, "set_to_none not chosen yet"
    assert conflict({**chosen_so_far, "set_to_none": False}, None, "cuda")[0] == "compile"
    assert conflict(chosen_so_far, 32, "cuda")[0] == "compile"
    assert conflict({**chosen_so_far, "compile": "default", "set_to_none": False}, 32, "cuda") is None
    assert conflict({**chosen_so_far, "compile": "max-autotune", "set_to_none": False}, None, "cuda")[0] == "compile"
    assert conflict({**chosen_so_far, "set_to_none": False}, 32, "cpu") is None, "a CPU replays no CUDA graphs"


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.sampled_from(["off", "default", RO]), min_size=1, max_size=3, unique=True),
    st.lists(st.booleans(), min_size=1, max_size=2, unique=True),
    st.lists(st.sampled_from([4, 8, 16, 32]), min_size=1, max_size=4, unique=True),
    st.sampled_from(["free", "fixed_effective"]),
)
def test_any_lists_give_a_space_without_unsafe_configurations_or_an_error_naming_a_key(
    compile_modes, set_to_none, batch_sizes, policy
):
    search = {**ALL_DEFAULT, **FIXED, "compile": compile_modes, "set_to_none": set_to_none, "batch_size": batch_sizes}
    ctx = gpu_context(batch_policy=policy)
    try:
        space = build_space(search, ctx)
    except ConfigError as error:
        assert str(error).startswith(("search.compile: ", "search.set_to_none: ", "search.batch_size: "))
        return
    configurations = list(space.configurations())
    assert configurations and not any(unsafe(knobs, ctx.effective_batch_size) for knobs in configurations)
    for name in ("compile", "set_to_none", "batch_size"):
        assert {knobs[name] for knobs in configurations} == set(space.candidates[name]), "each given value runs"
