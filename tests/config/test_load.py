"""Validation of the composed config into Settings: every error names its key."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autotune.app import _window
from autotune.config.load import did_you_mean, load_report_study, load_settings, unknown_key
from autotune.errors import ConfigError
from autotune.knobs import KNOBS
from autotune.measure.recorder import WindowPlan
from autotune.pipeline.facts import Refusal
from autotune.pipeline.inspect import read_facts
from tests.conftest import NEUTRAL_KNOBS, REPO, TEST_CONF, tiny_config


def test_a_valid_config_becomes_settings():
    settings = load_settings(tiny_config(), "tiny")
    assert settings.pipeline.name == "tiny"
    assert settings.study.name == "tiny", "the study is named after the pipeline by default"
    assert settings.baseline == {**NEUTRAL_KNOBS, "batch_size": 16}
    assert settings.search == {name: None for name in KNOBS}
    assert settings.measure.plan.min_steps == 3
    assert settings.measure.screen_plan == settings.measure.plan, "no screen_* keys: search trials use the window"


def test_what_a_trial_sets_in_its_window_for_itself_is_not_in_the_studys_settings():
    # A study is resumed only under the settings it was created with: a field each trial sets (its accumulation, its
    # loader's epoch) must not change them, or every study stored before the field came would be refused.
    plan = WindowPlan()
    assert _window(replace(plan, step_multiple=4, epoch_steps=32)) == _window(plan)
    assert set(_window(plan)) == {"min_steps", "min_time_s", "max_time_s", "warmup"}


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
    (
        tiny_config(measure={"warmup_min_time_s": 61}),
        "measure.warmup_min_time_s: must be < measure.trial_timeout_s, but got warmup_min_time_s=61 >= trial_timeout",
    ),
    (  # a warm-up that takes the whole timeout leaves no time to measure
        tiny_config(measure={"warmup_min_time_s": 60}),
        "measure.warmup_min_time_s: must be < measure.trial_timeout_s, but got warmup_min_time_s=60 >= trial_timeout",
    ),
    (tiny_config(study={"heartbeat_s": 1e10}), "study.heartbeat_s: expected a number >= 0.01 and <= "),
    (tiny_config(measure={"memory_interval_s": 1e10}), "measure.memory_interval_s: expected a number >= 0.01 and <="),
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
        {**tiny_config(), "pipeline": _pipeline(loss={"_target_": "torch.nn..Loss"})},
        "pipeline.loss._target_: expected a dotted import path, got 'torch.nn..Loss'",
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
    (tiny_config(study={"prune_margin": 0}), "study.prune_margin: expected a number > 0 and < 1 or null"),
    (tiny_config(study={"prune_margin": 1}), "study.prune_margin: expected a number > 0 and < 1 or null"),
    (tiny_config(study={"probe": "yes"}), "study.probe: expected true or false"),
    (tiny_config(measure={"loss_tolerance": -1}), "measure.loss_tolerance: expected a number > 0"),
    (tiny_config(measure={"device": "cuda:128"}), "measure.device: expected one of auto, cpu, cuda, got 'cuda:128'"),
    (tiny_config(study={"memory_budget_mb": 10**400}), "study.memory_budget_mb: expected a number > 0 or null, got 10"),
    (tiny_config(study={"name": "tiny\nrun"}), "study.name: expected a printable name without '#', got 'tiny\\nrun'"),
    (tiny_config(study={"storage": "sqlite:///a\x00.db"}), "study.storage: expected a non-empty string, got 'sqlite"),
    (tiny_config(study={"nam\ne": "x"}), "study.'nam\\ne': unknown key; expected one of: name, storage"),
    (
        {**tiny_config(), "pipeline": _pipeline(search={"num_workers": [0, 2]})},
        "pipeline.search: not a pipeline key: search is top-level; give it on the command line as search.KEY=VALUE",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(measure={"repeats": 3})},
        "pipeline.measure: not a pipeline key: measure is top-level; give it on the command line as measure.KEY=VALUE",
    ),
    (
        {**tiny_config(), "pipeline": _pipeline(mode="tune")},
        "pipeline.mode: not a pipeline key: mode is top-level; give it on the command line as mode=VALUE",
    ),
]


def test_a_pipeline_named_with_a_hash_by_its_key_or_its_file_is_refused_as_its_study_would_be():
    # The pipeline's name is its study's by default; '#' marks the studies autotune keeps beside it.
    with pytest.raises(ConfigError) as error:
        load_settings({**tiny_config(), "pipeline": _pipeline(name="resnet #2")}, "tiny")
    assert str(error.value) == "pipeline.name: expected a printable name without '#', got 'resnet #2'"
    with pytest.raises(ConfigError) as error:
        load_settings(tiny_config(), "resnet#2")
    assert str(error.value) == (
        "pipeline: the file's name names the study: expected a printable name without '#', got 'resnet#2'; rename "
        "the file, or give pipeline.name"
    )
    assert load_settings({**tiny_config(), "pipeline": _pipeline(name="resnet")}, "resnet#2").study.name == "resnet"


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
    assert did_you_mean("dri", ["dir"], "hydra.run") == "did you mean hydra.run.dir? ", "two letters swapped"


def test_a_key_hydra_does_not_have_is_unknown_not_to_be_added():
    refusal = str(unknown_key("hydra.run", "dri", ["dir"]))
    assert refusal == "hydra.run.dri: unknown key; did you mean hydra.run.dir? expected one of: dir"


def test_mode_report_refuses_a_bad_value_of_any_key_but_the_pipelines():
    config = {**tiny_config(study={"name": "tuned"}), "mode": "report"}
    assert load_report_study({**config, "pipeline": None}) == ("tuned", "sqlite:///autotune.db"), "it reads none"
    for section, values, refused in [
        ("measure", {"min_time_s": -1}, "measure.min_time_s: expected a number >= 0, got -1"),
        ("search", {"amp": ["fp8"]}, "search.amp: expected one of off, bf16, fp16, got 'fp8'"),
    ]:
        with pytest.raises(ConfigError, match=f"^{re.escape(refused)}$"):
            load_report_study({**config, section: {**config[section], **values}})


def test_a_key_of_another_group_is_named_with_its_group():
    assert str(unknown_key("", "device")).startswith("device: unknown key; did you mean measure.device? expected")
    rounds = str(unknown_key("", "rounds"))
    assert "did you mean selfcheck.rounds or benchmark.rounds or check.rounds?" in rounds
    assert "did you mean study.n_trials?" in str(unknown_key("search", "n_trials")), "a knob's group for a study key"
    assert "did you mean" not in str(unknown_key("", "devices")), "no key of that name"
    assert "did you mean mode or pipeline.model?" in str(unknown_key("", "model")), "a close key, and a mapping"


def _raising_module(tmp_path, monkeypatch, name: str) -> dict:
    """A pipeline whose model is in the module ``name`` (in ``tmp_path``, on sys.path), which raises when imported."""
    (tmp_path / f"{name}.py").write_text('raise RuntimeError("imported")\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    return {**tiny_config(), "pipeline": _pipeline(model={"_target_": f"{name}.Net"})}


def test_the_config_load_finds_each_target_without_importing_it(tmp_path, monkeypatch):
    config = _raising_module(tmp_path, monkeypatch, "model_raising_at_load")
    assert load_settings(config, "tiny").pipeline.components["model"] == {"_target_": "model_raising_at_load.Net"}
    assert "model_raising_at_load" not in sys.modules, "the user's module ran no code in the tuner"


def test_the_targets_are_imported_where_the_facts_are_read_naming_the_key(tmp_path, monkeypatch):
    spec = load_settings(_raising_module(tmp_path, monkeypatch, "model_raising_at_inspect"), "tiny").pipeline
    problem = "cannot import 'model_raising_at_inspect.Net': RuntimeError: imported"
    assert read_facts(spec, "cpu").refused == Refusal("pipeline.model._target_", problem)
    config = {**tiny_config(), "pipeline": _pipeline(loss={"_target_": "torch.nn.NoSuchLoss"})}
    problem = "cannot import 'torch.nn.NoSuchLoss': module 'torch.nn' has no 'NoSuchLoss'"
    refused = read_facts(load_settings(config, "tiny").pipeline, "cpu").refused
    assert refused == Refusal("pipeline.loss._target_", problem)
    config = {**tiny_config(), "pipeline": _pipeline(loss={"_target_": "torch.nn.MSELos"})}
    refused = read_facts(load_settings(config, "tiny").pipeline, "cpu").refused
    hint = "did you mean 'torch.nn.MSELoss'?"
    assert refused.problem == f"cannot import 'torch.nn.MSELos': module 'torch.nn' has no 'MSELos'; {hint}"
    config = {**tiny_config(), "pipeline": _pipeline(loss={"_target_": "math.pi"})}
    refused = read_facts(load_settings(config, "tiny").pipeline, "cpu").refused
    assert refused == Refusal(
        "pipeline.loss._target_", "'math.pi' is a float, not a class or function to call: name what builds the loss"
    )
    config = {**tiny_config(), "pipeline": _pipeline(loss={"_target_": "errno.EINTR"})}
    refused = read_facts(load_settings(config, "tiny").pipeline, "cpu").refused
    assert refused.problem.startswith("'errno.EINTR' is an int, not a class or function to call")


@pytest.mark.slow
def test_a_model_module_that_crashes_at_import_kills_a_subprocess_not_the_tuner(tmp_path):
    record = tmp_path / "imported"
    env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DEBUG"}
    env.update(PYTHONPATH=str(REPO), AUTOTUNE_TEST_IMPORTED=str(record))
    args = ["-cd", str(TEST_CONF), "pipeline=segfault_at_import", "study.n_trials=0", f"hydra.run.dir={tmp_path}/out"]
    tuner = subprocess.Popen(
        [sys.executable, "-m", "autotune", *args], cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    _, stderr = tuner.communicate(timeout=300)
    assert tuner.returncode == 1, stderr
    assert stderr.startswith("autotune: error: pipeline 'segfault_at_import': reading its facts"), stderr
    assert "SIGSEGV" in stderr and len(stderr.splitlines()) == 1
    importers = record.read_text().split()
    assert len(importers) == 1 and importers != [str(tuner.pid)], "imported once, by the subprocess reading the facts"
