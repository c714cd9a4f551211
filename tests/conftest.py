"""Shared fixtures: the repo's paths, settings for the tiny test pipeline, and a CLI runner."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.config.load import load_settings
from autotune.knobs import SearchContext

REPO = Path(__file__).resolve().parent.parent
TEST_CONF = REPO / "tests" / "conf"
# Knob values that change nothing, with batch size 32.
NEUTRAL_KNOBS = {
    "batch_size": 32,
    "num_workers": 0,
    "pin_memory": False,
    "channels_last": False,
    "amp": "off",
    "compile": "off",
}
FAST_MEASURE = ["measure.warmup_steps=2", "measure.min_steps=3", "measure.min_time_s=0.2", "measure.max_time_s=5"]


def tiny_config(**overrides) -> dict:
    """The composed config for tests/conf/pipeline/tiny.yaml as plain data, with section overrides."""
    config = {
        "pipeline": {
            "model": {"_target_": "tests.pipelines.tiny.TinyCNN"},
            "dataset": {"_target_": "tests.pipelines.tiny.TinyImages", "length": 256},
            "loss": {"_target_": "torch.nn.CrossEntropyLoss"},
            "optimizer": {"_target_": "torch.optim.SGD", "_partial_": True, "lr": 0.01},
            "baseline": {"batch_size": 16},
        },
        "search": {
            name: None for name in ("batch_size", "num_workers", "pin_memory", "amp", "channels_last", "compile")
        },
        "study": {"name": None, "storage": "sqlite:///autotune.db", "n_trials": 3, "timeout_s": None, "seed": 0},
        "measure": {
            "device": "cpu",
            "warmup_steps": 2,
            "min_steps": 3,
            "min_time_s": 0.2,
            "max_time_s": 5.0,
            "trial_timeout_s": 60,
            "memory_interval_s": 0.2,
        },
    }
    for section, values in overrides.items():
        config[section] = {**config[section], **values}
    return config


@pytest.fixture
def tiny_settings():
    return load_settings(tiny_config(), "tiny")


def cpu_context(**changes) -> SearchContext:
    fields = dict(
        device="cpu",
        cpu_count=2,
        bf16_supported=True,
        dataset_len=1000,
        input_ndim=4,
        baseline=dict(NEUTRAL_KNOBS),
    )
    fields.update(changes)
    return SearchContext(**fields)


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m autotune ARGS`` in ``cwd`` with the repo importable, as a user would run it."""
    full_env = {k: v for k, v in os.environ.items() if k != "AUTOTUNE_DEBUG"}
    full_env.update(PYTHONPATH=str(REPO), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "autotune", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
