"""The profiles a tuning run asks study.budget_s for (``profiles_left``) are those ``profile_tuned`` measures: the
reuse rule (``reusable``) is one, for both; each profile is stored as soon as it is made, so a run stopped before
the next keeps it."""

from __future__ import annotations

import pytest

from autotune.config.load import load_settings
from autotune.errors import PlacementRefusedError
from autotune.report.profiles import current_profiles
from autotune.results.model import load_results
from autotune.results.summary import summarise
from autotune.study.profiles import profile_tuned, profiles_left
from autotune.study.trim import run_trim
from tests.conftest import tiny_config
from tests.report.test_tuned_profiles import FakeProfiler, _profiled
from tests.study.test_trim import tuned


def measures(study, tmp_path, runner: FakeProfiler | None = None) -> list[str]:
    """The profiling runs ``profile_tuned`` makes of ``study`` as it stands (``runner``'s; a ``FakeProfiler`` where
    None)."""
    runner, settings = runner or FakeProfiler(), load_settings(tiny_config(), "tiny")
    profile_tuned(study, load_results(study), runner, settings, tmp_path, lambda *said: None)
    return runner.names


class StoppedAtTheRecommendation(FakeProfiler):
    """A runner that raises ``stop`` when asked to profile the recommendation: the run stopped (Ctrl-C) or refused
    (its process refusing its slot's cores) after the baseline's profile."""

    def __init__(self, stop: BaseException) -> None:
        super().__init__()
        self.stop = stop

    def trial(self, request, name):
        if name == "profile-recommended":
            raise self.stop
        return super().trial(request, name)


def test_the_profiles_left_are_those_profile_tuned_measures(tmp_path):
    study, _, _ = _profiled(tmp_path, FakeProfiler(failing=True))  # the recommendation's failed: measured again
    assert profiles_left(load_results(study)) == len(measures(study, tmp_path)) == 1
    assert profiles_left(load_results(study)) == len(measures(study, tmp_path)) == 0, "both stored, both ran"


@pytest.mark.parametrize("stop", [KeyboardInterrupt(), PlacementRefusedError("study.cpu_sets: refused")])
def test_a_run_stopped_while_profiling_the_recommendation_keeps_the_baseline_profile_for_the_next(tmp_path, stop):
    study, confirmation, pipeline = tuned(tmp_path)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    with pytest.raises(type(stop)):
        measures(study, tmp_path, StoppedAtTheRecommendation(stop))
    results = load_results(study)
    assert results.profiles.baseline.result is not None and results.profiles.recommended is None
    assert current_profiles(results.profiles, summarise(results)) is None, "no report shows it as a finished pair"
    assert profiles_left(results) == 1 and measures(study, tmp_path) == ["profile-recommended"], (
        "the resumed run reuses the baseline's profile"
    )
    assert current_profiles(load_results(study).profiles, summarise(results)).recommended.result is not None
