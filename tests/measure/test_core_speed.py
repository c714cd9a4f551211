"""The cores' speed read around a run: how it is read, and when a run counts as disturbed by it."""

from __future__ import annotations

import io
import json
import os
from dataclasses import replace

import optuna
import pandas
import pytest

from autotune import app
from autotune.config.load import load_settings
from autotune.measure import core_speed
from autotune.measure.core_speed import CoreGauge, CoreSpeed, core_times_ms
from autotune.results.model import load_results
from autotune.trial.result import TrialResult
from tests.conftest import NEUTRAL_KNOBS, fake_measurement, tiny_config


def test_a_reading_times_each_core_in_turn_and_gives_the_thread_its_affinity_back(monkeypatch):
    pinned = []
    real = os.sched_setaffinity
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cores: (pinned.append(set(cores)), real(pid, cores)))
    mine = os.sched_getaffinity(0)
    times = core_times_ms(sorted(mine))
    assert len(times) == len(mine) and all(t > 0 for t in times)
    assert pinned == [{core} for core in sorted(mine)] + [mine] and os.sched_getaffinity(0) == mine


def test_a_reading_gives_the_affinity_back_when_it_raises(monkeypatch):
    mine = os.sched_getaffinity(0)
    monkeypatch.setattr(core_speed, "loop_s", lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        core_times_ms(sorted(mine))
    assert os.sched_getaffinity(0) == mine


@pytest.mark.parametrize(
    ("before", "after", "slow", "words"),
    [
        ([7.0, 7.2], [7.1, 6.9], False, None),
        ([7.0, 8.9], [7.1, 6.9], False, None),  # 1.27x: beyond a quiet host's spread, short of slow
        ([7.0, 7.2], [9.4, 6.9], True, "the cores ran 1.3x slow"),
        ([10.5, 7.2], [7.1, 6.9], True, "the cores ran 1.5x slow"),
    ],
)
def test_a_run_whose_cores_read_slow_before_or_after_it_ran_slow(before, after, slow, words):
    speed = CoreSpeed(before, after, 7.0)
    assert speed.slow is slow and speed.disturbance == words


class Readings:
    """Core times to give, one reading of two cores at a time, and the cores each reading was asked for."""

    def __init__(self, *times: float):
        self.times, self.asked = list(times), []

    def __call__(self, cores):
        self.asked.append(cores)
        return [self.times.pop(0), self.times.pop(0)]


def test_the_gauge_judges_a_run_against_the_median_of_every_reading_it_took_the_first_run_after_a_few_more():
    first = Readings(*[7.0] * 2 * core_speed.FIRST_READINGS, 7.1, 7.0, 7.2, 6.9, 9.8, 7.0, 7.0, 7.0)
    gauge = CoreGauge((2, 3), read=first)
    quiet = gauge.after(gauge.before())
    assert len(first.asked) == core_speed.FIRST_READINGS + 2 and all(cores == [2, 3] for cores in first.asked)
    assert quiet == CoreSpeed([7.1, 7.0], [7.2, 6.9], 7.0) and not quiet.slow
    slowed = gauge.after(gauge.before())
    assert len(first.asked) == core_speed.FIRST_READINGS + 4, "a reading before and one after each later run"
    assert slowed.before_ms == [9.8, 7.0] and slowed.slow and slowed.usual_ms == 7.0


def test_on_a_machine_of_many_cores_each_reading_times_a_few_the_next_ones_in_turn(monkeypatch):
    monkeypatch.setattr(core_speed, "FIRST_READINGS", 0)
    asked = []
    gauge = CoreGauge(range(6), read=lambda cores: asked.append(cores) or [7.0] * len(cores))
    gauge.after(gauge.before())
    gauge.before()
    assert asked == [[0, 1, 2, 3], [4, 5, 0, 1], [2, 3, 4, 5]]
    assert CoreGauge().cores == tuple(sorted(os.sched_getaffinity(0))), "by default every core it may use"


def test_a_run_is_disturbed_by_other_processes_or_by_slow_cores_and_says_which():
    run = TrialResult(knobs=NEUTRAL_KNOBS, measurement=fake_measurement(100.0))
    slow = CoreSpeed([9.8, 7.0], [7.0, 7.0], 7.0)
    assert not run.disturbed and run.disturbance is None
    assert not replace(run, core_speed=CoreSpeed([7.0, 7.0], [7.0, 7.0], 7.0)).disturbed
    slowed = replace(run, core_speed=slow)
    assert slowed.disturbed and slowed.disturbance == "the cores ran 1.4x slow"
    busy = replace(
        run.measurement, system=replace(run.measurement.system, cpu_total_percent=100.0, process_tree_cores=1.2)
    )
    both = replace(slowed, measurement=busy)
    assert both.disturbance == "other processes busy (0.8 cores); the cores ran 1.4x slow"
    assert TrialResult.from_dict(both.to_dict()) == both
    failed = TrialResult(knobs=NEUTRAL_KNOBS, core_speed=slow)
    assert not failed.disturbed, "a failed run has no figures to doubt"


def test_a_tuning_run_reads_the_cores_around_its_runs_and_its_records_keep_the_readings(tmp_path):
    study = {"n_trials": 1, "storage": f"sqlite:///{tmp_path}/s.db"}
    settings = load_settings(tiny_config(study=study, measure={"core_speed": True}), "tiny")
    app.run(settings, tmp_path / "out", out=io.StringIO())
    rows = pandas.read_csv(tmp_path / "out" / "trials.csv")
    assert rows["cores_slowdown"].notna().all() and (rows["cores_slowdown"] > 0).all()
    stored = TrialResult.from_dict(json.loads((tmp_path / "out" / "trials" / "baseline.result.json").read_text()))
    assert stored.core_speed is None, "the trial's own file: the tuner reads the cores, outside the trial"
    results = load_results(optuna.load_study(study_name="tiny", storage=study["storage"]))
    assert results.baseline.result.core_speed.usual_ms > 0, "stored with the study: reports re-render from it"
