"""The profiles a tuning run asks study.budget_s for (``profiles_left``) are those ``profile_tuned`` measures: the
reuse rule (``reusable``) is one, for both."""

from __future__ import annotations

from autotune.config.load import load_settings
from autotune.results.model import load_results
from autotune.study.profiles import profile_tuned, profiles_left
from tests.conftest import tiny_config
from tests.report.test_tuned_profiles import FakeProfiler, _profiled


def measures(study, tmp_path) -> list[str]:
    """The profiling runs ``profile_tuned`` makes of ``study`` as it stands."""
    runner, settings = FakeProfiler(), load_settings(tiny_config(), "tiny")
    profile_tuned(study, load_results(study), runner, settings, tmp_path, lambda *said: None)
    return runner.names


def test_the_profiles_left_are_those_profile_tuned_measures(tmp_path):
    study, _, _ = _profiled(tmp_path, FakeProfiler(failing=True))  # the recommendation's failed: measured again
    assert profiles_left(load_results(study)) == len(measures(study, tmp_path)) == 1
    assert profiles_left(load_results(study)) == len(measures(study, tmp_path)) == 0, "both stored, both ran"
