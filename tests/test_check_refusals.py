"""mode=check refuses, before any round, a gate that could not mean anything: a report.json or check.json measured
on another pipeline, and one whose speedup its own interval contradicts (edited by hand). The files autotune writes,
and wrote before the headline gain was its interval's geomean, are gated as before."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from autotune import check as check_mode
from autotune.config.load import load_settings
from autotune.errors import ConfigError
from autotune.measure.stats import ratio_interval
from autotune.report.json_report import render_json
from autotune.results.finalist import Finalist
from autotune.results.model import StudyResults
from autotune.results.race import Confirmation
from autotune.results.summary import summarise
from tests.conftest import TEST_CONF, tiny_config
from tests.report.test_reports import sample_results
from tests.test_check import BASELINE, measured, report, run_check

# The review's hand-edited report.json: 1.5x, though its own rounds read 88.1x (27.2-285.6).
EDITED = {"geomean": 88.11026422438671, "low": 27.17846486827165, "high": 285.64595900905056, "n": 3}
HELD = [150.0, 157.0, 146.0]  # against tests.test_check's baseline runs: 1.50x, above a floor of 1.35x


def _refusal(against: Path, tmp_path: Path, monkeypatch, pipeline: str | None = None) -> str:
    """The message mode=check refuses ``against`` with (on the tiny pipeline, named ``pipeline`` where given),
    asserting nothing ran and nothing was printed or written first."""
    monkeypatch.setattr(check_mode, "measure_rounds", None)  # called, it would fail the test
    monkeypatch.setattr(check_mode, "inspect_run", None)  # nor is a process started to read the pipeline
    config = {**tiny_config(), "mode": "check", "against": str(against)}
    if pipeline:
        config["pipeline"] = {**config["pipeline"], "name": pipeline}
    out = io.StringIO()
    with pytest.raises(ConfigError) as error:
        check_mode.run(load_settings(config, "tiny"), tmp_path / "out", out)
    assert error.value.exit_code == 2 and error.value.key == "against"
    assert out.getvalue() == "" and not (tmp_path / "out").exists()
    return str(error.value)


# Another pipeline's file.


@pytest.mark.parametrize("recommended", [{**BASELINE, "batch_size": 32}, BASELINE])
def test_a_report_tuned_for_another_pipeline_is_refused_before_any_round(tmp_path, monkeypatch, recommended):
    # It was a note, then a verdict on two pipelines' speedups: 0.22x of another pipeline's 88x "regressed"; a
    # recommendation of the baseline itself passed as "nothing to gate".
    against = report(tmp_path, pipeline="good", recommended=recommended)
    assert _refusal(against, tmp_path, monkeypatch) == (
        f"against: {against} was tuned for pipeline 'good', not 'tiny': check it with pipeline=good, or give this "
        "pipeline's own report.json (where it is the same pipeline, renamed since: ++pipeline.name=good)"
    )


def test_a_check_json_of_another_pipeline_is_refused_as_a_reference(tmp_path, monkeypatch):
    monkeypatch.setattr(check_mode, "measure_rounds", measured(HELD))
    reference = run_check(report(tmp_path), tmp_path / "first", io.StringIO())
    message = _refusal(reference, tmp_path, monkeypatch, pipeline="renamed")
    assert message.startswith(f"against: {reference} was checked for pipeline 'tiny', not 'renamed': check it with ")


def test_the_same_pipeline_renamed_is_checked_under_its_old_name_as_the_refusal_says(tmp_path, monkeypatch, cli_here):
    # tests/conf/pipeline/tiny.yaml gives no name: pipeline.name=good alone is refused there, ++ sets it either way.
    monkeypatch.setattr(check_mode, "measure_rounds", measured(HELD))
    against = report(tmp_path, pipeline="good")
    args = ["-cd", str(TEST_CONF), "pipeline=tiny", "mode=check", f"against={against}"]
    refused = cli_here([*args, f"hydra.run.dir={tmp_path}/refused"], cwd=tmp_path)
    assert refused.returncode == 2 and "++pipeline.name=good)" in refused.stderr
    renamed = cli_here([*args, "++pipeline.name=good", f"hydra.run.dir={tmp_path}/out"], cwd=tmp_path)
    assert renamed.returncode == 0, renamed.stdout + renamed.stderr
    assert "autotune check: pipeline 'good' on " in renamed.stdout and "note:" not in renamed.stdout
    assert json.loads((tmp_path / "out" / "check.json").read_text())["benchmark"]["pipeline"] == "good"


# A speedup its own interval contradicts.


def test_a_speedup_edited_outside_its_own_interval_is_refused_naming_the_keys(tmp_path, monkeypatch):
    # It was gated on 1.5x (floor 1.35x: holds), its "before" line printing 1.50x beside an interval of 27-286.
    against = report(tmp_path, speedup=1.5, speedup_interval=EDITED, speedup_rounds=3)
    assert _refusal(against, tmp_path, monkeypatch) == (
        f"against: {against}: speedup: 1.5 lies outside its own 95 % interval, speedup_interval 27.17846486827165 to "
        "285.64595900905056 (geomean 88.11026422438671): gate against the report.json as the tuning run wrote it, or "
        "render it again from its study (mode=report)"
    )


def test_a_speedup_edited_within_its_interval_but_off_its_geomean_is_refused(tmp_path, monkeypatch):
    interval = {"geomean": 1.5, "low": 1.2, "high": 1.9, "n": 3}
    message = _refusal(report(tmp_path, speedup=1.6, speedup_interval=interval), tmp_path, monkeypatch)
    assert message.endswith(
        "speedup: 1.6 is not the geomean of its own speedup_interval, 1.5, which autotune writes as the speedup: gate "
        "against the report.json as the tuning run wrote it, or render it again from its study (mode=report)"
    )


def _written(tmp_path: Path, baseline_runs: list[float], winner_runs: list[float]) -> tuple[Path, dict]:
    """The report.json autotune writes of a race with these rounds, and its data."""
    race = Confirmation(baseline_runs, [Finalist("0", {}, 1, 100.0, winner_runs)])
    results = StudyResults(**{**sample_results().__dict__, "confirmation": race})
    path = tmp_path / "report.json"
    path.write_text(render_json(results, summarise(results)))
    return path, json.loads(path.read_text())


@pytest.mark.parametrize(
    ("baseline_runs", "winner_runs"),
    [
        ([100.0, 96.0, 104.0], [118.0, 121.0, 119.0]),
        # a drifting machine: the medians' ratio (1.40) lies outside the paired interval, its geomean does not
        ([100.0, 100.0, 150.0, 200.0, 200.0], [102.0, 102.0, 210.0, 210.0, 210.0]),
    ],
)
def test_a_report_json_as_autotune_writes_it_is_gated_on_its_speedup(tmp_path, baseline_runs, winner_runs):
    path, data = _written(tmp_path, baseline_runs, winner_runs)
    tuned = check_mode.load_tuned(str(path))
    paired = ratio_interval([w / b for w, b in zip(winner_runs, baseline_runs, strict=True)])
    assert tuned.speedup == data["speedup"] == pytest.approx(paired.geomean) and tuned.speedup_interval == paired
    path.write_text(json.dumps(data | {"speedup": float(f"{data['speedup']:.15g}")}))
    assert check_mode.load_tuned(str(path)).speedup == pytest.approx(paired.geomean), "written again, 15 digits"


def test_an_earlier_autotunes_report_whose_speedup_is_the_ratio_of_its_throughputs_is_gated_on_it(tmp_path):
    # Before the headline gain was its interval's geomean, report.json gave the medians' ratio as the speedup.
    path, data = _written(tmp_path, [100.0, 96.0, 104.0], [118.0, 121.0, 119.0])
    medians = data["recommended"]["throughput_sps"] / data["baseline"]["throughput_sps"]
    interval = data["speedup_interval"]
    assert medians == pytest.approx(1.19) and interval["low"] < medians < interval["high"] != interval["geomean"]
    path.write_text(json.dumps(data | {"speedup": medians}))
    assert check_mode.load_tuned(str(path)).speedup == medians
    path.write_text(json.dumps(data | {"speedup": 1.191}))  # within the interval, but neither figure
    with pytest.raises(ConfigError, match=r"speedup: 1\.191 is not the geomean of its own speedup_interval, 1\.1939"):
        check_mode.load_tuned(str(path))


def test_a_check_json_whose_speedup_before_lies_outside_its_interval_is_refused_as_a_reference(tmp_path, monkeypatch):
    # Lowered by hand, the speedup before lowers the floor its verdict was read against: a check that regressed
    # would read as one that held, and be gated on.
    monkeypatch.setattr(check_mode, "measure_rounds", measured(HELD))
    interval = {"geomean": 1.5, "low": 1.3, "high": 1.7, "n": 3}
    reference = run_check(report(tmp_path, speedup_interval=interval), tmp_path / "first", io.StringIO())
    record = json.loads(reference.read_text())
    assert check_mode.load_tuned(str(reference)).speedup == pytest.approx(1.50, abs=0.01), "as written, a reference"
    reference.write_text(json.dumps(record | {"before": 1.0}))
    message = _refusal(reference, tmp_path, monkeypatch)
    assert message.startswith(f"against: {reference}: before: 1.0 lies outside its own 95 % interval, before_interval")
    assert message.endswith(
        f"gate against the check.json as autotune wrote it, or against the file it checked ({tmp_path}/report.json)"
    )


def test_an_earlier_autotunes_report_whose_ratio_of_medians_fell_outside_its_interval_is_still_gated_on_it(tmp_path):
    # On a drifting machine the medians' ratio an earlier autotune wrote as the speedup could lie outside the paired
    # interval (why the geomean replaced it): such a file is as that autotune wrote it, not a hand edit.
    path, data = _written(tmp_path, [100.0, 100.0, 150.0, 200.0, 200.0], [102.0, 102.0, 210.0, 210.0, 210.0])
    old = {**data, "recommended": {**data["recommended"], "throughput_sps": 210.0}}
    old["baseline"] = {**data["baseline"], "throughput_sps": 150.0}
    assert not old["speedup_interval"]["low"] <= 1.4 <= old["speedup_interval"]["high"], "the drift's case"
    path.write_text(json.dumps(old | {"speedup": 1.4}))
    assert check_mode.load_tuned(str(path)).speedup == pytest.approx(1.4)
