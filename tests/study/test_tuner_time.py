"""Where a tuning run's time went: its stages and the phases of its trial processes add up to its wall time, are
stored in the study as it goes, and mode=report renders them again."""

from __future__ import annotations

import io
import json
import time
from dataclasses import replace

import pytest

from autotune import app, rerender
from autotune.config.load import load_settings
from autotune.report.tuner_time import forecast_lines
from autotune.results.tuner_time import Foretold, RunTime, TunerTime, process_phases
from autotune.runner import TrialRunner
from autotune.study.clock import RunClock
from autotune.trial.result import Failure, FailureKind, TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config


def _settings(tmp_path, baseline_batch_size=16, **study):
    fixed = {name: [value] for name, value in NEUTRAL_KNOBS.items() if value is not None}
    config = tiny_config(
        study={"n_trials": 2, "confirm_rounds": 2, "probe": True, **study},
        search={**fixed, "batch_size": [16, 32]},
    )
    config["pipeline"]["baseline"] = {"batch_size": baseline_batch_size}
    settings = load_settings(config, "tiny")
    return replace(settings, study=replace(settings.study, storage=f"sqlite:///{tmp_path}/study.db"))


@pytest.mark.slow
def test_a_tuning_runs_time_adds_up_by_stage_and_phase_and_mode_report_renders_it(tmp_path, monkeypatch):
    settings = _settings(tmp_path, diagnose=True)
    out, ends, unpatched = io.StringIO(), [], RunClock.save

    def save(clock: RunClock, finished: bool = False) -> None:
        unpatched(clock, finished)
        if finished:
            ends.append(time.monotonic())

    monkeypatch.setattr(RunClock, "save", save)
    started = time.monotonic()
    files = app.run(settings, tmp_path / "tuned", out)
    elapsed = ends[0] - started
    report = json.loads(files["report.json"].read_text())
    spent = report["tuner_time"]
    wall = spent["wall_s"]
    # The run's time as measured here, from its start to its record's last save (the reports render after it).
    assert 0.95 * elapsed <= wall <= elapsed, (wall, elapsed)
    assert list(spent["stages_s"]) == ["inspect", "baseline", "probe", "search", "race", "trim", "profiles", "tuner"]
    # Each stage's remainder (and the run's, outside the stages) is the tuner's own work, so the parts sum to the
    # wall time by construction: what can fail is a remainder below zero, a process's time counted twice.
    for stage, parts in spent["by_stage_s"].items():
        assert all(seconds >= 0 for seconds in parts.values()), f"{stage}: time counted twice: {parts}"
    phases = spent["phases_s"]
    for measured in ("startup", "build", "warmup", "windows", "probing", "profiling", "other", "tuner"):
        assert phases[measured] > 0, measured
    assert spent["by_stage_s"]["search"]["windows"] > 0
    assert [run["finished"] for run in spent["runs"]] == [True]
    last = out.getvalue().rstrip().splitlines()[-1]
    assert last.startswith(f"where the tuner's {wall:.0f} s went: ") and "; by stage: " in last, last
    (foretold,) = [run["foretold"] for run in spent["runs"]]
    assert 0 < foretold["at_s"] < wall and foretold["rest_s"] > 0, "said after the first search trial, stored"
    compared = out.getvalue().rstrip().splitlines()[-2]
    assert compared.startswith(f"foretold {foretold['at_s']:.0f} s in: up to about ") and "; the rest took " in compared

    again = io.StringIO()
    rendered = rerender.run(settings.study.name, settings.study.storage, tmp_path / "again", again)
    assert json.loads(rendered["report.json"].read_text())["tuner_time"] == spent
    assert again.getvalue().rstrip().splitlines()[-2:] == [compared, last], "rendered from the study alone"
    page = rendered["report.html"].read_text()
    assert "<h2>Where the tuner&#x27;s time went</h2>" in page and f"Where the tuner&#x27;s {wall:.0f} s went" in page

    app.run(settings, tmp_path / "resumed", io.StringIO())  # everything stored: a second run of the study
    resumed = json.loads((tmp_path / "resumed" / "report.json").read_text())["tuner_time"]
    assert len(resumed["runs"]) == 2 and resumed["runs"][0] == spent["runs"][0]
    assert resumed["wall_s"] == pytest.approx(sum(run["wall_s"] for run in resumed["runs"]))
    assert sum(resumed["phases_s"].values()) == pytest.approx(resumed["wall_s"])
    assert "(2 runs: " in (tmp_path / "resumed" / "report.md").read_text()


def test_a_process_splits_into_its_phases_and_one_stopped_by_the_tuner_is_stopped_as_a_whole():
    measured = TrialResult({}, fake_measurement(100.0), wall_s=5.0, startup_s=1.5, build_s=0.5)
    timing = measured.timing  # warm-up 1 s, window 1 s
    assert process_phases(measured) == {"startup": 1.5, "build": 0.5, "warmup": 1.0, "compile": 0.0, "windows": 1.0,
                                        "other": 1.0}  # fmt: skip
    compiled = replace(measured, measurement=replace(measured.measurement, timing=replace(timing, compile_s=0.75)))
    assert process_phases(compiled)["warmup"] == 0.25 and process_phases(compiled)["compile"] == 0.75
    pruned = TrialResult({}, failure=Failure(FailureKind.PRUNED, "slower"), wall_s=2.0)
    assert process_phases(pruned) == {"stopped": 2.0}


def test_the_tuners_own_work_is_what_remains_of_each_stage_and_of_the_run():
    run = RunTime(0.0, 10.0, {"baseline": 4.0, "search": 5.0}, {"search": {"startup": 1.0, "windows": 3.0}})
    assert run.seconds() == {
        "baseline": {"tuner": 4.0},
        "search": {"startup": 1.0, "windows": 3.0, "tuner": 1.0},
        "tuner": {"tuner": 1.0},
    }
    both = TunerTime([run, RunTime(20.0, 2.0, {"search": 1.5}, {})])
    assert both.wall_s == 12.0 and sum(both.phases().values()) == pytest.approx(12.0)
    assert both.stages() == {"baseline": 4.0, "search": 6.5, "tuner": 1.5}


def test_a_trial_stopped_with_the_run_counts_as_a_stopped_trial_not_the_tuners_own_work(tmp_path, monkeypatch):
    def interrupted(*args, **kwargs):
        time.sleep(0.2)
        raise KeyboardInterrupt

    monkeypatch.setattr("autotune.runner.run_trial", interrupted)  # a check, the probe, the inspect
    monkeypatch.setattr("autotune.runner.run_repeated", interrupted)  # a search, race or trim run
    clock = RunClock()
    runner = TrialRunner(_settings(tmp_path), "cpu", tmp_path / "trials", clock=clock)
    for stage, run in (
        ("race", runner.run),
        ("search", runner.screen),
        ("probe", lambda knobs, name: runner.probe(None)),
    ):
        began = time.monotonic()
        with pytest.raises(KeyboardInterrupt), clock.stage(stage):
            run(NEUTRAL_KNOBS | {"batch_size": 16}, "stopped")
        spanned = time.monotonic() - began  # the stopped process and the runner's own work around it
        processes = clock.record().processes[stage]
        assert set(processes) == {"stopped"} and 0.2 <= processes["stopped"] <= spanned, (stage, processes, spanned)


def test_what_a_run_foretold_is_set_beside_what_its_rest_took_and_a_record_without_one_reads_as_none():
    run = RunTime(0.0, 130.0, {}, {}, finished=True, foretold=Foretold(30.0, 125.0))
    assert RunTime.from_dict(run.to_dict()) == run
    stopped = replace(run, finished=False)
    assert forecast_lines(TunerTime([run])) == [
        "foretold 30 s in: up to about 125 s more; the rest took 100 s (0.80x the forecast)"
    ]
    assert forecast_lines(TunerTime([stopped])) == [
        "foretold 30 s in: up to about 125 s more; its record ends 100 s later, before the run's end"
    ]
    older = {key: value for key, value in run.to_dict().items() if key != "foretold"}
    assert RunTime.from_dict(older).foretold is None and forecast_lines(TunerTime([RunTime.from_dict(older)])) == []
    assert RunTime.from_dict({**older, "foretold": None}).foretold is None
    two = forecast_lines(TunerTime([run, replace(run, started_at=100.0)]))
    assert len(set(two)) == 2 and all(" (run of 1970-01-01 00:0" in line for line in two), "each run named"


@pytest.mark.slow
def test_a_run_stopped_in_its_race_says_so_and_is_not_recorded_as_finished(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM (the CLI raises KeyboardInterrupt) after the search: the run is stopped, not finished, so its
    single-run recommendation says no race has re-measured it."""

    def stopped(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "run_race", stopped)
    settings, out = _settings(tmp_path, probe=False, baseline_batch_size=2), io.StringIO()  # slower than any trial
    with pytest.raises(KeyboardInterrupt):
        app.run(settings, tmp_path / "tuned", out)
    assert "Stopped: interrupted" in out.getvalue()
    report = json.loads((tmp_path / "tuned" / "report.json").read_text())
    assert [run["finished"] for run in report["tuner_time"]["runs"]] == [False]
    assert "No race has proven it" in (tmp_path / "tuned" / "report.md").read_text()
