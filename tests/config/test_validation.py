"""Hostile input: every key of the config is validated by its row of the table (autotune/config/keys.py), and any
value of any key is either taken or refused in one line naming the key; no other exception escapes."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hydra import compose, initialize_config_dir
from hypothesis import given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from autotune.config import values
from autotune.config.keys import KEYS
from autotune.config.load import load_settings
from autotune.config.settings import MeasureSettings, ScreenPlan, Settings, StudySettings
from autotune.errors import ConfigError
from autotune.measure.recorder import WindowPlan
from autotune.measure.warmup import WarmupPolicy
from tests.conftest import REPO, tiny_config

# The fields the loader builds from several keys, and WarmupPolicy.span, which no key sets.
BUILT = {
    Settings: {"pipeline", "baseline", "search", "study", "measure"},
    StudySettings: set(),
    MeasureSettings: {"plan", "screen_plan"},
    # step_multiple and epoch_steps: each trial's, from its gradient accumulation and its loader
    WindowPlan: {"warmup", "step_multiple", "epoch_steps"},
    WarmupPolicy: {"span"},
    ScreenPlan: set(),
}

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([-1, 0, 1, 2, 6, 2**32 - 1, 2**32, 2**63, 10**30, 10**400]),  # 10**400: beyond any float
    st.floats(),  # nan, inf, -0.0, subnormals
    st.floats(min_value=-1, max_value=10),  # about the bounds
    st.text(max_size=12),  # any unicode: control characters, line breaks, the empty string
    st.sampled_from(["off", "fp16", "report", "fixed_effective", "cpu", "cuda:1", "cuda:128", "cuda:01", "\x00"]),
    st.sampled_from(["throughput", "torch.nn.Linear", "os.path.join", "no_such_module.X", "1abc.X", "a..b", "é"]),
)
HOSTILE = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=4), SCALARS, max_size=2))


def test_every_key_of_the_config_file_has_a_row_and_every_row_a_key_there():
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base=None):
        config = OmegaConf.to_container(compose(config_name="config", overrides=["pipeline=mymodel"]))
    del config["pipeline"]  # a pipeline's file, not conf/config.yaml: its rows are checked below
    assert set(_leaves(config)) == {path for path in KEYS if not path.startswith("pipeline.")}


def test_every_setting_is_filled_by_exactly_one_row():
    for owner, built in BUILT.items():
        filled = [key.into[1] for key in KEYS.values() if key.into and key.into[0] is owner]
        assert sorted(filled) == sorted({f.name for f in fields(owner)} - built), owner.__name__


@pytest.mark.parametrize("path", list(KEYS))
@settings(max_examples=50, deadline=None)
@given(value=HOSTILE)
def test_any_value_of_a_key_is_taken_or_refused_in_one_line_naming_the_key(path, value):
    try:
        assert isinstance(load_settings(_with(path, value), "tiny"), Settings)
    except ConfigError as error:
        assert error.key in _named_by(path), str(error)
        assert str(error).startswith(f"{error.key}: ") and len(str(error).splitlines()) == 1, str(error)


def test_a_hostile_value_on_the_command_line_is_one_line_with_exit_2(tmp_path, cli_here):
    proc = cli_here(["pipeline=mymodel", "measure.device=cuda:128", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    refusal = "expected one of auto, cpu, cuda, got 'cuda:128'; or cuda:N for the GPU of index N (0 to 99)"
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"autotune: error: measure.device: {refusal}\n")


def _leaves(node: dict, path: str = ""):
    for name, value in node.items():
        full = f"{path}.{name}" if path else name
        yield from _leaves(value, full) if isinstance(value, dict) else [full]


def _with(path: str, value) -> dict:
    """The tiny test pipeline's config with the key ``path`` set to ``value`` (its sections made where missing)."""
    config = tiny_config()
    *sections, name = path.split(".")
    node = config
    for section in sections:
        node = node.setdefault(section, {})
    node[name] = value
    return config


def _named_by(path: str) -> set[str | None]:
    """The keys a refusal of a value of ``path`` may name: its own, or one it is ordered against."""
    return {path, *_ordered_against(KEYS[path])} | {key.path for key in KEYS.values() if path in _ordered_against(key)}


def _ordered_against(key) -> set[str | None]:
    return {key.at_least, key.at_most, key.below}


def test_a_shipped_pipeline_run_away_from_the_checkout_is_told_where_its_code_is(monkeypatch):
    monkeypatch.setattr(values, "_findable", lambda module: False)  # as from a directory outside the checkout
    with pytest.raises(ValueError, match=rf"no module 'examples' .*\(it is in autotune's checkout: run from {REPO}"):
        values.ImportPath().parse("examples.mymodel.SmallCNN")
    with pytest.raises(ValueError, match=r"no module 'mypkg' in the current directory or on PYTHONPATH$"):
        values.ImportPath().parse("mypkg.Net")
