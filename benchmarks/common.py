"""Shared helpers for the benchmarks: settings composed as the CLI composes them, the example pipeline built
in-process, and summaries."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import torch
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from autotune.config.load import load_settings
from autotune.config.settings import Settings
from autotune.measure.environment import describe_machine
from examples.mymodel import SmallCNN, SyntheticImages

CONF = Path(__file__).resolve().parent.parent / "conf"


def compose_config(pipeline: str, overrides: list[str]) -> dict[str, Any]:
    """conf/config.yaml with ``pipeline`` and ``overrides``, composed as the CLI does, as plain data."""
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = compose(config_name="config", overrides=[f"pipeline={pipeline}", *overrides])
    return OmegaConf.to_container(cfg, resolve=True)


def settings_for(pipeline: str, overrides: list[str], components: dict[str, Any] | None = None) -> Settings:
    """The Settings of ``pipeline`` with ``overrides``, its components replaced by ``components`` where given."""
    config = compose_config(pipeline, overrides)
    config["pipeline"].update(components or {})
    return load_settings(config, pipeline)


def example_pipeline(batch_size: int = 32, num_workers: int = 0, length: int = 4096):
    """SmallCNN + SyntheticImages as mymodel.yaml configures them: (model, loss, optimizer, loader)."""
    torch.manual_seed(0)
    model = SmallCNN(num_classes=10)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = torch.utils.data.DataLoader(
        SyntheticImages(length=length), batch_size=batch_size, shuffle=True, drop_last=True, num_workers=num_workers
    )
    return model, torch.nn.CrossEntropyLoss(), optimizer, loader


def train_step(model, loss_fn, optimizer, inputs, targets) -> None:
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def announce_machine() -> dict[str, Any]:
    """This machine's description, its CPU and the flags that change which knobs win printed first: a figure is
    never read without them (CPUs change between our build machines)."""
    machine = describe_machine()
    flags = ", ".join(machine.get("cpu_flags") or ["none of note"])
    print(f"{machine['cpu_model']} ({machine['cpu_count']} cores; flags {flags}; GPU {machine['gpu'] or 'none'})")
    return machine


def describe(values: list[float]) -> str:
    mean = statistics.fmean(values)
    cv = statistics.stdev(values) / mean if len(values) > 1 else 0.0
    return f"median {statistics.median(values):.1f}, mean {mean:.1f}, CV {cv:.1%}, n={len(values)}"


def knob_values(assignments: list[str]) -> dict[str, Any]:
    """``["malloc=keep", "num_threads=1"]`` as knob values (YAML scalars)."""
    pairs = (assignment.split("=", 1) for assignment in assignments)
    return {name: yaml.safe_load(value) for name, value in pairs}
