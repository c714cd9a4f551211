"""Validation of the composed config into Settings: every error names its key."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.config.load import did_you_mean, load_settings
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from tests.conftest import NEUTRAL_KNOBS, tiny_config


def test_a_valid_config_becomes_settings():
    settings = load_settings(tiny_config(), "tiny")
    assert settings.pipeline.name == "tiny"
    assert settings.study.name == "tiny", "the study is named after the pipeline by default"
    assert settings.baseline == {**NEUTRAL_KNOBS, "batch_size": 16}
    assert settings.search == {name: None for name in KNOBS}
    assert settings.measure.plan.min_steps == 3
    assert settings.measure.screen_plan == settings.measure.plan, "no screen_* keys: search trials use the window"


def test_search_trials_are_screened_with_a_shorter_window():
    settings = load_settings(tiny_config(measure={"screen_min_steps": 2, "screen_min_time_s": 0.1}), "tiny")
    screen, plan = settings.measure.screen_plan, settings.measure.plan
    assert (screen.min_steps, screen.min_time_s) == (2, 0.1)
    assert (screen.max_time_s, screen.warmup) == (plan.max_time_s, plan.warmup)


def test_search_lists_are_parsed_and_deduplicated():
    settings = load_settings(tiny_config(search={"batch_size": [32, 64, 32], "amp": False}), "tiny")
    assert settings.search["batch_size"] == [32, 64]
    assert settings.search["amp"] == ["off"]


def _pipeline(**changes):
    pipeline = {**tiny_config()["pipeline"], **changes}
    return {k: v for k, v in pipeline.items() if v != "DROP"}


BAD_CONFIGS = [
    (tiny_config(search={"batch_size": [0]}), "search.batch_size: expected an integer >= 1, got 0"),
    (tiny_config(search={"batch_size": []}), "search.batch_size: the candidate list is empty"),
    (tiny_config(search={"amp": ["fp8"]}), "search.amp: expected one of off, bf16, fp16, got 'fp8'"),
    (tiny_config(search={"flash": [True]}), "search.flash: unknown knob; expected one of: batch_size"),
    (tiny_config(study={"n_trials": -1}), "study.n_trials: expected an integer >= 0"),
    (tiny_config(study={"timeout_s": 0}), "study.timeout_s: expected a number > 0 or null"),
    (tiny_config(measure={"device": "tpu"}), "measure.device: expected one of auto, cpu, cuda"),
    (tiny_config(measure={"min_time_s": 5, "max_time_s": 1}), "measure.max_time_s: must be >= measure.min_time_s"),
    (tiny_config(measure={"warmup_min_steps": 0}), "measure.warmup_min_steps: expected an integer >= 1"),
    (tiny_config(measure={"screen_min_time_s": 9}), "measure.screen_min_time_s: must be <= measure.max_time_s"),
    (tiny_config(measure={"screen_min_steps": 0}), "measure.screen_min_steps: expected an integer >= 1 or null"),
    (
        tiny_config(measure={"warmup_min_steps": 9, "warmup_max_steps": 3}),
        "measure.warmup_max_steps: must be >= measure.warmup_min_steps",
    ),
    (tiny_config(measure={"warmup_tolerance": 0}), "measure.warmup_tolerance: expected a number > 0"),
    ({**tiny_config(), "pipeline": _pipeline(optimizer="DROP")}, "pipeline.optimizer: is missing"),
    (
        {**tiny_config(), "pipeline": _pipeline(optimzer={"_target_": "torch.optim.SGD"})},
        "pipeline.optimzer: unknown key; did you mean pipeline.optimizer? expected one of: model, dataset",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(model={"hidden": 3})},
        "pipeline.model: expected a mapping with a _target_",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(model={"_target_": "no_such_module.Net"})},
        "pipeline.model._target_: cannot import 'no_such_module.Net'",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(loss={"_target_": "torch.nn.NoSuchLoss"})},
        "pipeline.loss._target_: cannot import 'torch.nn.NoSuchLoss'",
    ),
    ({**tiny_config(), "pipeline": _pipeline(baseline={"num_workers": 0})}, "pipeline.baseline.batch_size: is missing"),
    (
        {**tiny_config(), "pipeline": _pipeline(baseline={"batch_size": 16, "amp": "fp8"})},
        "pipeline.baseline.amp: expected one of",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(baseline={"batch_size": 16, "turbo": True})},
        "pipeline.baseline.turbo: unknown key",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(baseline={"batch_size": 16, "persistent_workers": True})},
        "pipeline.baseline.persistent_workers: only applies with num_workers > 0",
    ),
    (tiny_config(search={"batch_policy": "fixed"}), "search.batch_policy: expected one of free, fixed_effective"),
    (tiny_config(study={"objectives": ["memory"]}), "study.objectives: expected [throughput] or"),
    (tiny_config(study={"objectives": ["peak_memory", "throughput"]}), "study.objectives: expected [throughput] or"),
    (tiny_config(study={"prune_margin": 0}), "study.prune_margin: expected a number > 0 or null"),
    (tiny_config(study={"probe": "yes"}), "study.probe: expected true or false"),
    (tiny_config(measure={"loss_tolerance": -1}), "measure.loss_tolerance: expected a number > 0"),
]


def test_worker_options_of_a_baseline_without_workers_are_not_applicable():
    settings = load_settings(tiny_config(), "tiny")
    assert settings.baseline["prefetch_factor"] is None and settings.baseline["persistent_workers"] is None
    config = tiny_config()
    config["pipeline"]["baseline"] = {"batch_size": 16, "num_workers": 2, "persistent_workers": True}
    baseline = load_settings(config, "tiny").baseline
    assert baseline["prefetch_factor"] == 2 and baseline["persistent_workers"] is True


def test_batch_policy_and_objectives_are_read():
    objectives = ["throughput", "peak_memory"]
    config = tiny_config(search={"batch_policy": "fixed_effective"}, study={"objectives": objectives})
    settings = load_settings(config, "tiny")
    assert settings.batch_policy == "fixed_effective"
    assert settings.study.objectives == ("throughput", "peak_memory") and settings.study.multi_objective


@pytest.mark.parametrize(("config", "message"), BAD_CONFIGS, ids=[m.split(":")[0] for _, m in BAD_CONFIGS])
def test_bad_configs_name_the_key(config, message):
    with pytest.raises(ConfigError) as error:
        load_settings(config, "tiny")
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


@given(st.one_of(st.integers(), st.booleans(), st.text(max_size=8), st.none(), st.floats(allow_nan=False)))
def test_any_batch_size_value_is_accepted_only_if_a_positive_int(value):
    config = tiny_config(search={"batch_size": [value]})
    valid = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if valid:
        assert load_settings(config, "tiny").search["batch_size"] == [value]
    else:
        with pytest.raises(ConfigError, match="^search.batch_size: "):
            load_settings(config, "tiny")


@given(st.lists(st.sampled_from(["off", "bf16", "fp16", "fp8", "", "OFF", 1]), min_size=1, max_size=4))
def test_amp_candidates_are_valid_names_or_a_config_error(values):
    config = tiny_config(search={"amp": values})
    if all(v in ("off", "bf16", "fp16") for v in values):
        assert load_settings(config, "tiny").search["amp"] == list(dict.fromkeys(values))
    else:
        with pytest.raises(ConfigError, match="^search.amp: expected one of"):
            load_settings(config, "tiny")


def test_a_suggestion_only_for_a_close_misspelling():
    assert did_you_mean("n_trails", ["n_trials", "seed"], "study") == "did you mean study.n_trials? "
    assert did_you_mean("num_threads", ["batch_size", "num_workers"], "pipeline.baseline") == "", "a different key"
