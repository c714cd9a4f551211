"""mode=profile end to end: one configuration profiled in a subprocess, the record saved, the pages rendered."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace
from types import SimpleNamespace

import pytest

from autotune import app, diagnose, rerender
from autotune.config.load import load_settings
from autotune.errors import BaselineFailedError, ConfigError
from autotune.measure.environment import describe_machine, machine_id, this_machine_id
from autotune.measure.profiling import OperatorStat
from autotune.pipeline.facts import DeviceFacts, Inspection, PipelineFacts
from autotune.results.model import load_results
from autotune.results.profile import ProfileRecord
from autotune.runner import TrialRunner
from autotune.study.clock import RunClock
from autotune.study.profiles import profile_tuned
from autotune.study.trim import run_trim
from autotune.trial.placement import CPUS_ENV
from autotune.trial.result import TrialRequest, TrialResult
from tests.conftest import NEUTRAL_KNOBS, tiny_config
from tests.report.test_tuned_profiles import FakeProfiler
from tests.results.profile_records import profile_result
from tests.study.test_trim import tuned
from tests.study.test_tuner import settings as tuner_settings
from tests.test_selfcheck import measured_elsewhere

# What torch raises converting a model with a 5-D weight (a Conv3d's) to channels_last: the inspection's refusal.
REFUSAL = "required rank 4 tensor to use channels_last format"


def _settings(tmp_path, mode="profile", study=None, **pipeline):
    config = tiny_config(pipeline=pipeline, study=study or {})
    config |= {"mode": mode, "profile": {"steps": 8, "trace_steps": 2, "batches": 3}}
    settings = load_settings(config, "tiny")
    return replace(settings, study=replace(settings.study, storage=f"sqlite:///{tmp_path}/none.db"))


def test_the_baseline_is_profiled_in_a_subprocess_and_its_diagnosis_saved_then_rendered(tmp_path, monkeypatch):
    sent, trial = [], TrialRunner.trial  # the request file a trial reads is deleted once it ended
    monkeypatch.setattr(TrialRunner, "trial", lambda me, req, *a, **k: sent.append(req) or trial(me, req, *a, **k))
    settings = _settings(tmp_path)
    assert settings.mode == "profile" and (settings.profile_steps, settings.profile_batches) == (8, 3)
    given = ["-cd", "my conf", "mode=profile", "pipeline=tiny", "study.storage=sqlite:///s.db", "profile.steps=8"]
    monkeypatch.setattr("sys.argv", ["autotune", *given, "hydra.run.dir=out"])
    out = io.StringIO()
    files = diagnose.run(settings, tmp_path, out)
    assert set(files) == {"profile.json", "profile.md", "profile.html"}
    saved = json.loads(files["profile.json"].read_text())
    record = ProfileRecord.from_dict(saved)
    assert record.result is not None and record.result.stages.steps >= 8 and record.tried is None  # or to 0.5 s
    command = "python -m autotune -cd 'my conf' pipeline=tiny study.storage=sqlite:///s.db"
    assert record.tune_command == command, "the tuning command keeps what names the config and the study"
    assert f"{command} measures them" in record.diagnosis.findings[-1]
    assert saved["diagnosis"]["verdict"] == record.diagnosis.verdict and record.diagnosis.advice
    trace = tmp_path / "profile" / "tiny.pt.trace.json"
    assert record.result.operators.trace_file == str(trace) and json.loads(trace.read_text())["traceEvents"]
    html = files["profile.html"].read_text()
    assert '<a href="profile/tiny.pt.trace.json">' in html and html.count("<img") == 2
    markdown = files["profile.md"].read_text()
    for heading in ("Verdict", "What to change", "Where a step's time goes", "Hot functions", "Top operators"):
        assert f"## {heading}" in markdown
    assert "tests/fixtures/tiny.py" in markdown, "the hot functions name the dataset's code"
    assert "- [the trace: profile/tiny.pt.trace.json](<profile/tiny.pt.trace.json>)" in markdown
    printed = out.getvalue()
    assert f"verdict: {record.diagnosis.verdict}" in printed and "hottest in loading" in printed
    request = TrialRequest.from_dict(json.loads(json.dumps(sent[-1].to_dict())))
    assert request.profile.steps == 8 and request.profile.trace_file == str(trace)
    assert TrialRequest.from_dict(replace(request, profile=None).to_dict()).profile is None
    result = TrialResult.from_dict(json.loads((tmp_path / "profile" / "baseline.result.json").read_text()))
    assert result.ok and result.profile == record.result


def test_a_profiling_run_that_fails_is_saved_with_its_reason_and_exits_1(tmp_path):
    settings = _settings(tmp_path, model={"_target_": "tests.fixtures.faults.RaisingCNN"})
    with pytest.raises(BaselineFailedError, match="profiling run failed"):
        diagnose.run(settings, tmp_path, io.StringIO())
    record = ProfileRecord.from_dict(json.loads((tmp_path / "profile.json").read_text()))
    assert record.result is None and "exception" in record.failure
    assert "The profiling run failed." in (tmp_path / "profile.md").read_text()


def test_profile_settings_are_checked():
    config = tiny_config()
    config["profile"] = {"steps": 3, "trace_steps": 2, "batches": 3}
    with pytest.raises(ConfigError, match="profile.steps"):
        load_settings(config, "tiny")


@pytest.mark.slow
def test_a_tuning_run_profiles_its_baseline_and_recommendation_after_the_race_and_mode_report_renders_them(tmp_path):
    settings = _settings(tmp_path, "tune", {"n_trials": 1, "diagnose": True})
    out = io.StringIO()
    files = app.run(settings, tmp_path / "tuned", out)
    printed = out.getvalue()
    assert "[profile baseline] " in printed and "What limits it: baseline " in printed
    profiled = json.loads(files["report.json"].read_text())["profiles"]
    assert profiled["baseline"]["verdict"] and profiled["baseline"]["wall_s"] > 0, profiled["baseline"]
    assert (tmp_path / "tuned" / "trials" / "profile-baseline.log").exists()
    assert (tmp_path / "tuned" / "profile" / "tiny-baseline.pt.trace.json").exists()
    again = rerender.run(settings.study.name, settings.study.storage, tmp_path / "again", io.StringIO())
    assert json.loads(again["report.json"].read_text()) == json.loads(files["report.json"].read_text())
    resumed = io.StringIO()
    app.run(settings, tmp_path / "resumed", resumed)
    assert "[profile baseline, stored] " in resumed.getvalue(), "a finished study's profiles are not run again"


def test_a_tuning_run_with_study_diagnose_false_profiles_nothing(tmp_path):
    out = io.StringIO()
    files = app.run(_settings(tmp_path, "tune", {"n_trials": 0, "diagnose": False}), tmp_path, out)
    assert "[profile" not in out.getvalue() and json.loads(files["report.json"].read_text())["profiles"] is None


def test_what_the_study_tried_is_looked_up_under_the_machine_its_pinned_runs_were_stored_under(tmp_path, monkeypatch):
    # A study run with study.cpu_sets stores its results under the machine as a run pinned to one set sees it.
    core = min(os.sched_getaffinity(0))
    settings = _settings(tmp_path, study={"cpu_sets": [[core]]})
    machine = {**describe_machine(), "cpu_count": 8, "torch_threads": 8}
    looked_up = []

    def stored_tries(settings, here):
        looked_up.append(here)
        raise _Looked

    monkeypatch.setattr(diagnose, "inspect_run", lambda *_: Inspection(DeviceFacts(), device="cpu", machine=machine))
    monkeypatch.setattr(diagnose, "stored_tries", stored_tries)
    with pytest.raises(_Looked):
        diagnose.run(settings, tmp_path, io.StringIO())
    assert looked_up == [machine_id({**machine, "cpu_count": 1, "torch_threads": 1})] != [machine_id(machine)]


def test_a_study_measured_on_another_machine_only_says_nothing_of_what_was_tried_here(tiny_settings, tmp_path):
    settings = measured_elsewhere(tiny_settings, tmp_path)
    assert diagnose.stored_tries(settings, this_machine_id()) is None, "another machine's tries are not this one's"
    elsewhere = machine_id({**describe_machine(), "cpu_count": 999})
    assert diagnose.stored_tries(settings, elsewhere) is not None, "on that machine, they are"


class _Looked(Exception):
    """Raised once the study's tries were looked up: the profile itself is not the test's."""


def test_a_profile_runs_in_the_studys_first_slot_and_advises_on_its_cores(tmp_path, monkeypatch):
    core = min(os.sched_getaffinity(0))
    settings = _settings(tmp_path, study={"cpu_sets": [[core]]})
    machine = {**describe_machine(), "cpu_count": 8, "torch_threads": 8}
    given = []

    def profile_configuration(runner, settings, knobs, label, plan, tried, machine, **_):
        given.append((runner.request.placement, machine["cpu_count"]))
        raise _Looked

    facts = Inspection(DeviceFacts(), device="cpu", pipeline=PipelineFacts(256, 4), machine=machine)
    monkeypatch.setattr(diagnose, "inspect_run", lambda *_: facts)
    monkeypatch.setattr(diagnose, "profile_configuration", profile_configuration)
    with pytest.raises(_Looked):
        diagnose.run(settings, tmp_path, io.StringIO())
    assert given == [({CPUS_ENV: str(core)}, 1)], "pinned as the tuning run's were, its advice on as many cores"


def _convolving(**fields) -> ProfileRecord:
    """A compute-bound profile of convolutions over 4-D inputs, whose advice sets channels_last where it can."""
    result = profile_result(wait_share=0.0)
    ops = result.operators
    convolution = OperatorStat("aten::mkldnn_convolution", 10, ops.step_operators[0].self_cpu_s)
    convolved = replace(result, operators=replace(ops, step_operators=[convolution, *ops.step_operators]), input_ndim=4)
    knobs = {**NEUTRAL_KNOBS, "batch_size": 16}
    return ProfileRecord("mine", "cpu", "baseline", knobs, {"cpu_count": 8}, "mine", convolved, **fields)


def _advised(record: ProfileRecord) -> list[str | None]:
    return [advice.knob for advice in record.diagnosis.advice]


def test_the_profiles_advice_leaves_out_channels_last_where_the_inspection_found_the_model_cannot_go_so():
    assert "channels_last" in _advised(_convolving()), "a model that converts is advised it"
    refused = _convolving(channels_last_refused=REFUSAL)
    assert "channels_last" not in _advised(refused)
    assert ProfileRecord.from_dict(json.loads(json.dumps(refused.to_dict()))) == refused, "saved with it, read back"


def test_mode_profile_records_the_refusal_the_inspection_read(tmp_path):
    # A Conv3d beside 4-D image batches: the inspection (its subprocess) refuses channels_last; the record says why.
    settings = _settings(tmp_path, model={"_target_": "tests.pipeline.test_inspected_knob_facts.VolumeBeside"})
    files = diagnose.run(settings, tmp_path, io.StringIO())
    record = ProfileRecord.from_dict(json.loads(files["profile.json"].read_text()))
    assert record.channels_last_refused == REFUSAL, "what torch raised, as the inspection read it"
    assert "channels_last" not in _advised(record)


def _trimmed(tmp_path):
    """A study after its race and trim, nothing profiled yet."""
    study, confirmation, pipeline = tuned(tmp_path)
    run_trim(study, load_results(study), confirmation, pipeline, lambda name, result: None)
    return study


@pytest.mark.parametrize("stored_before", [False, True], ids=["run", "stored before the refusal was kept"])
def test_a_tuning_runs_profiles_carry_its_inspections_refusal(tmp_path, stored_before):
    study, settings = _trimmed(tmp_path), load_settings(tiny_config(), "tiny")
    if stored_before:
        profile_tuned(study, load_results(study), FakeProfiler(), settings, tmp_path, lambda *_: None)
    runner = FakeProfiler()
    profiles = profile_tuned(study, load_results(study), runner, settings, tmp_path, lambda *_: None, REFUSAL)
    assert len(runner.names) == (0 if stored_before else 2), "a stored profile is reused, as a resumed run does"
    assert profiles.baseline.channels_last_refused == REFUSAL == profiles.recommended.channels_last_refused
    assert load_results(study).profiles == profiles, "stored with it"


def test_a_tuning_run_profiles_with_the_refusal_its_inspection_read(tmp_path, monkeypatch):
    study, confirmation, _ = tuned(tmp_path)
    given = []
    monkeypatch.setattr(app, "run_race", lambda *args, **kwargs: confirmation)
    monkeypatch.setattr(app, "run_trim", lambda *args, **kwargs: [])
    monkeypatch.setattr(app, "profile_tuned", lambda *args: given.append(args[-1]))
    full = SimpleNamespace(study=replace(tuner_settings(tmp_path), diagnose=True))
    runner = SimpleNamespace(new_draw=lambda: None)
    app._finish(
        study, this_machine_id(), full, runner, None, tmp_path, print, io.StringIO(), RunClock(), lambda: False, REFUSAL
    )
    assert given == [REFUSAL]
