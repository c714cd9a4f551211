"""What a study's description keeps: a setting that changes what a stored trial's figures mean refuses a resume under
another value, naming its key; one that changes none resumes under any."""

from __future__ import annotations

import pytest

from autotune.app import _study_meta
from autotune.config.load import load_settings
from autotune.errors import StudyMismatchError
from autotune.study.start import open_study
from autotune.study.tuner import ensure_baseline
from tests.conftest import tiny_config
from tests.study.test_tuner import BASELINE, SPACE, FakeMeasure, settings


def _described(study: dict | None = None, measure: dict | None = None) -> dict:
    """The description a tuning run of the tiny pipeline gives its study, with these ``study.*`` and ``measure.*``."""
    return _study_meta(load_settings(tiny_config(study=study or {}, measure=measure or {}), "tiny"), "cpu", SPACE)


def _measured(tmp_path, described: dict) -> None:
    """A study of ``described`` holding its baseline: one a resume must not mix other settings into."""
    ensure_baseline(open_study(settings(tmp_path), described), BASELINE, FakeMeasure())


def test_a_study_resumes_under_another_pruning_margin(tmp_path):
    # The margin decides which trials a search stops early, not what a measured trial read: refusing the study would
    # throw its measurements away.
    _measured(tmp_path, _described({"prune_margin": 0.25}))
    assert open_study(settings(tmp_path), _described({"prune_margin": None}))


def test_a_study_resumed_with_other_objectives_is_refused_naming_the_key(tmp_path):
    _measured(tmp_path, _described())
    with pytest.raises(StudyMismatchError, match=r"study\.objectives"):
        open_study(settings(tmp_path), _described({"objectives": ["throughput", "peak_memory"]}))


@pytest.mark.parametrize("key", ["fork_trials", "core_speed"])
def test_a_measurement_setting_that_changes_no_figure_is_not_described(key):
    # A forked trial reads what a fresh one reads (docs/benchmarks.md, section 5); the cores are timed before and
    # after a run, not during it, which decides only whether the run is read again.
    assert _described(measure={key: True}) == _described(measure={key: False})
