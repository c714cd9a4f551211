"""Every config file shipped in conf/ (and the test pipelines) composes and validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from autotune.config.load import load_settings
from autotune.pipeline.inspect import inspect_pipeline
from tests.conftest import REPO, TEST_CONF

CONF = REPO / "conf"
SHIPPED = sorted(p.stem for p in (CONF / "pipeline").glob("*.yaml"))
TEST_PIPELINES = sorted(p.stem for p in (TEST_CONF / "pipeline").glob("*.yaml"))


def _compose(pipeline: str, extra_dir: Path | None = None):
    overrides = [f"pipeline={pipeline}"]
    if extra_dir:
        overrides.append(f"hydra.searchpath=[file://{extra_dir}]")
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return compose(config_name="config", overrides=overrides)


def test_there_is_a_shipped_pipeline():
    assert "mymodel" in SHIPPED


@pytest.mark.slow
@pytest.mark.parametrize("pipeline", SHIPPED)
def test_shipped_pipelines_validate(pipeline):
    cfg = _compose(pipeline)
    settings = load_settings(OmegaConf.to_container(cfg, resolve=True), pipeline)
    assert settings.pipeline.name == pipeline
    facts = inspect_pipeline(settings.pipeline)
    assert facts.dataset_len > 0


@pytest.mark.parametrize("pipeline", TEST_PIPELINES)
def test_test_pipelines_validate(pipeline):
    cfg = _compose(pipeline, TEST_CONF)
    settings = load_settings(OmegaConf.to_container(cfg, resolve=True), pipeline)
    assert settings.pipeline.name == pipeline


def test_main_config_defaults():
    cfg = _compose("mymodel")
    assert cfg.study.n_trials == 8 and cfg.study.storage == "sqlite:///autotune.db"
    assert cfg.search.batch_policy == "free"
    assert all(value is None for key, value in cfg.search.items() if key != "batch_policy")
