"""A tuning run's baseline and recommendation, profiled after the race, stored in the study and shown side by side
in every report; profiling runs are faked here (the real one: tests/test_profile.py)."""

from __future__ import annotations

import io
import json
from dataclasses import replace

from autotune.config.load import load_settings
from autotune.report import write_reports
from autotune.report.console import print_summary
from autotune.report.diagnosis import profile_document
from autotune.report.profiles import current_profiles, side_by_side_rows
from autotune.results.model import load_results
from autotune.results.profile import TunedProfiles
from autotune.results.remedy_model import Tried
from autotune.results.summary import summarise
from autotune.study.profiles import profile_tuned
from autotune.study.trim import run_trim
from autotune.trial.result import Failure, FailureKind, TrialRequest, TrialResult
from tests.conftest import tiny_config, trial_request
from tests.report.test_reports import MACHINE, MEASURE
from tests.results.profile_records import profile_result
from tests.study.test_trim import BASELINE, tuned


class FakeProfiler:
    """A runner whose profiling runs find the baseline data-bound and any other configuration overhead-bound (or
    fail, with ``failing``)."""

    def __init__(self, failing: bool = False) -> None:
        self.request, self.failing, self.names = trial_request(), failing, []

    def trial(self, request: TrialRequest, name: str) -> TrialResult:
        self.names.append(name)
        if self.failing and request.knobs != BASELINE:
            return TrialResult(knobs=request.knobs, failure=Failure(FailureKind.TIMEOUT, "timeout after 5 s"))
        baseline = request.knobs == BASELINE
        found = profile_result(wait_share=0.6) if baseline else profile_result(wait_share=0.05, small_operators=0.7)
        return TrialResult(knobs=request.knobs, profile=found, wall_s=2.5)


def _profiled(tmp_path, runner: FakeProfiler, out: io.StringIO | None = None):
    study, confirmation, pipeline = tuned(tmp_path)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    settings = load_settings(tiny_config(), "tiny")
    lines = out or io.StringIO()

    def shown(record, stored):
        print(f"{record.label} stored={stored}", file=lines)

    profiles = profile_tuned(study, load_results(study), runner, settings, tmp_path / "profile", shown)
    return study, profiles, lines


def test_the_baseline_and_the_recommendation_are_profiled_stored_and_shown_side_by_side(tmp_path):
    runner = FakeProfiler()
    study, profiles, lines = _profiled(tmp_path, runner)
    assert runner.names == ["profile-baseline", "profile-recommended"] and "stored=False" in lines.getvalue()
    results = load_results(study)
    assert results.profiles == profiles, "stored typed, read back equal"
    assert profiles.baseline.diagnosis.verdict == "data-bound"
    assert profiles.recommended.diagnosis.gist == (
        "host-overhead-bound (waiting for data 5% of the step, host overhead 70% of the model step)"
    )
    summary = summarise(results)
    assert profiles.about(BASELINE, summary.recommended.result.knobs)

    files = write_reports(replace(results, machine=MACHINE, measure=MEASURE), summary, tmp_path / "out")
    markdown = files["report.md"].read_text()
    assert "## What limits each: the baseline and the recommendation profiled" in markdown
    assert "| verdict | data-bound (waiting for data 60% of the step) | host-overhead-bound (" in markdown
    assert "the throughputs above are the race's" in markdown
    html = files["report.html"].read_text()
    assert "Where the time goes, per sample" in html, "the paired stacked bar"
    data = json.loads(files["report.json"].read_text())["profiles"]
    assert data["baseline"]["verdict"] == "data-bound" and data["recommended"]["wall_s"] == 2.5
    assert set(data["recommended"]["stages_ms"]) >= {"forward", "optimizer step"}

    out = io.StringIO()
    print_summary(summary, {}, "done", out, results.profiles)
    said = out.getvalue()
    assert (
        "What limits it: baseline data-bound (waiting for data 60% of the step) → recommended host-overhead-bound"
    ) in said
    assert "Next, for the recommended: set compile=default" in said

    slower = replace(profiles.recommended.tried, twins={"compile=off->default": [0.88]})
    measured = replace(profiles, recommended=replace(profiles.recommended, tried=slower))
    advice = measured.recommended.diagnosis.advice
    assert advice[-1].knob == "compile" and advice[-1].measured_no_gain, "the study measured it 0.88x: last"
    out = io.StringIO()
    print_summary(summary, {}, "done", out, measured)
    assert "Next, for the recommended: set compile=default" not in out.getvalue(), "not next: measured slower"
    assert f"Next, for the recommended: {advice[0].action}" in out.getvalue()
    only = replace(measured.recommended, tried=replace(slower, values={**slower.values, "batch_size": [128]}))
    assert [a.knob for a in only.diagnosis.advice] == ["compile"], "batch 128 measured: the compile advice alone"
    out = io.StringIO()
    print_summary(summary, {}, "done", out, replace(measured, recommended=only))
    assert (
        "Next, for the recommended: only changes the tuner measured no faster beyond noise (3%) (see the report)"
        in out.getvalue()
    )
    headers, rows = side_by_side_rows(replace(measured, recommended=only))
    first = next(row for row in rows if row[0] == "first advice")
    assert first[headers.index("recommended")] == "only changes the tuner measured no faster beyond noise (3%)"
    headline = profile_document(only, tmp_path / "doc").headline
    assert (
        "First: only changes the tuner measured no faster beyond noise (3%) (the table below lists what it measured)."
        in headline.rest
    )


def test_advice_for_the_recommendation_leaves_out_the_knobs_it_changed_and_says_what_the_tuner_measured(tmp_path):
    _, profiles, _ = _profiled(tmp_path, FakeProfiler())
    recommended = profiles.recommended
    advised = {a.knob: a for a in recommended.diagnosis.advice if a.knob}
    measured = recommended.tried.values["batch_size"]
    assert 128 not in measured and advised["batch_size"].action.startswith("set batch_size=128")
    assert advised["batch_size"].tried == (
        f"not tried by the tuner: study 's' measured batch_size at {', '.join(map(str, measured))}"
    ), "a batch beyond the largest the tuner measured is advised, though the recommendation changed batch_size"
    chose = replace(recommended.tried, values={**recommended.tried.values, "batch_size": [*measured, 128]})
    assert "batch_size" not in {a.knob for a in replace(recommended, tried=chose).diagnosis.advice}, (
        "the recommendation changed batch_size: its races chose 64 over the 128 it measured too"
    )
    assert advised["compile"].tried == "not tried by the tuner: study 's' measured compile at off"
    without = replace(recommended, tried=replace(recommended.tried, recommended=None))
    assert "batch_size" in {a.knob for a in without.diagnosis.advice}, "advised where the tuner did not settle it"
    tried = Tried("s", {"amp": ["off", "bf16"], "num_workers": [0, 2]}, {"num_workers": 2}, raced={"amp": ["bf16"]})
    assert tried.says("amp", "bf16") == "the tuner measured amp=bf16 and did not recommend it (study 's')"
    assert tried.says("num_workers", 2) == "the tuner recommends num_workers=2 (study 's')"
    assert tried.settled("num_workers", {"num_workers": 2}, 0) and not tried.settled(
        "num_workers", {"num_workers": 0}, 2
    )
    assert not tried.settled("num_workers", {"num_workers": 2}, 4), "4 workers never measured"


def test_a_resumed_run_reuses_the_stored_profiles(tmp_path):
    study, first, _ = _profiled(tmp_path, FakeProfiler())
    runner, told = FakeProfiler(), []
    settings = load_settings(tiny_config(), "tiny")
    again = profile_tuned(study, load_results(study), runner, settings, tmp_path, lambda *said: told.append(said))
    assert runner.names == [] and again == first and told == [(first.baseline, True), (first.recommended, True)]
    assert TunedProfiles.from_dict(again.to_dict()) == again
    config = tiny_config()
    config["search"]["batch_policy"] = "fixed_effective"
    accumulated = load_settings(config, "tiny")
    reused = profile_tuned(study, load_results(study), runner, accumulated, tmp_path, lambda *said: None)
    assert runner.names == [] and reused.baseline.effective_batch_size == accumulated.baseline["batch_size"], (
        "a profile stored before it kept the batch accumulated to is reused with it"
    )


def test_a_profiling_run_that_fails_is_recorded_with_its_reason_and_the_reports_still_render(tmp_path):
    study, profiles, _ = _profiled(tmp_path, FakeProfiler(failing=True))
    assert profiles.recommended.result is None and profiles.recommended.failure == "timeout: timeout after 5 s"
    results = load_results(study)
    files = write_reports(replace(results, machine=MACHINE, measure=MEASURE), summarise(results), tmp_path / "out")
    assert "profiling failed: timeout: timeout after 5 s" in files["report.md"].read_text()
    assert json.loads(files["report.json"].read_text())["profiles"]["recommended"]["failure"]
    runner = FakeProfiler()
    profile_tuned(study, results, runner, load_settings(tiny_config(), "tiny"), tmp_path, lambda r, s: None)
    assert runner.names == ["profile-recommended"], "a failed profile is profiled again; the baseline's is reused"


def test_profiles_of_another_recommendation_are_not_shown(tmp_path):
    study, profiles, _ = _profiled(tmp_path, FakeProfiler())
    summary = summarise(load_results(study))
    assert current_profiles(profiles, summary) == profiles
    other = replace(profiles, recommended=replace(profiles.recommended, knobs={**BASELINE, "batch_size": 32}))
    assert current_profiles(other, summary) is None and current_profiles(None, summary) is None
