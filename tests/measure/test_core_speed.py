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
from autotune.trial.result import Disturbance, TrialResult
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
    ("before", "after", "slow", "slowdown"),
    [
        ([7.0, 7.2], [7.1, 6.9], False, 7.2 / 7.0),
        ([7.0, 8.9], [7.1, 6.9], False, 8.9 / 7.0),  # 1.27x: beyond a quiet host's spread, short of slow
        ([7.0, 7.2], [9.4, 6.9], True, 9.4 / 7.0),
        ([10.5, 7.2], [7.1, 6.9], True, 10.5 / 7.0),
    ],
)
def test_a_run_whose_cores_read_slow_before_or_after_it_ran_slow(before, after, slow, slowdown):
    speed = CoreSpeed([0, 1], before, after, [7.0, 7.0])
    assert speed.slow is slow and speed.slowdown == pytest.approx(slowdown)


class Readings:
    """Times to give each core, in turn per core, and the cores each reading was asked for."""

    def __init__(self, **times: list[float]):
        self.times, self.asked = {int(core[1:]): list(values) for core, values in times.items()}, []

    def __call__(self, cores):
        self.asked.append(cores)
        return [self.times[core].pop(0) for core in cores]


def test_each_core_is_judged_against_the_median_of_every_time_read_on_it():
    # core 2 runs at 7 ms, core 3 (an efficiency core) at 11: each against its own
    readings = Readings(c2=[7.0, 7.0, 7.1, 7.2, 9.8, 7.0], c3=[11.0, 11.0, 11.2, 10.9, 11.0, 11.0])
    gauge = CoreGauge((2, 3), read=readings)
    gauge.after(gauge.before())
    quiet = gauge.after(gauge.before())
    assert len(readings.asked) == 4 and all(cores == [2, 3] for cores in readings.asked), "once before, once after"
    assert quiet == CoreSpeed([2, 3], [7.1, 11.2], [7.2, 10.9], [7.05, 11.0], 4) and not quiet.slow
    slowed = gauge.after(gauge.before())
    assert slowed.before_ms == [9.8, 11.0] and slowed.slow and slowed.usual_ms == [7.05, 11.0]


def test_no_run_is_judged_before_its_cores_were_read_at_enough_moments():
    # A host that flips between two speeds, read first in its fast state: against those two readings alone the
    # slow state reads 1.6x; its usual speed is not known yet
    gauge = CoreGauge((0,), read=Readings(c0=[20.0, 20.0] + [32.0] * 8))
    first, second = gauge.after(gauge.before()), gauge.after(gauge.before())
    assert (first.readings, second.readings) == (2, core_speed.MOMENTS)
    assert first.slowdown == pytest.approx(1.0) and not first.slow
    assert second.slowdown == pytest.approx(32 / 26) and not second.slow, "judged once four times are known"
    assert not any(gauge.after(gauge.before()).slow for _ in range(3)), "the slow state is its usual one"
    assert CoreSpeed([0], [32.0], [32.0], [20.0]).slow, "a record stored before readings was kept was judged"


def test_the_usual_speed_follows_every_time_read_this_runs_included():
    gauge = CoreGauge((0,), read=Readings(c0=[7.0] * 2 + [8.0] * 4 + [10.2, 8.0]))
    for _ in range(3):
        gauge.after(gauge.before())
    fourth = gauge.after(gauge.before())
    # against the first run's 7.0, 1.46x; without this run's readings, 8.0 and 1.275x
    assert fourth.usual_ms == [8.0] and not fourth.slow


def test_on_a_machine_of_many_cores_each_run_is_read_on_a_few_the_next_ones_in_turn():
    asked = []
    gauge = CoreGauge(range(6), read=lambda cores: asked.append(cores) or [7.0] * len(cores))
    gauge.after(gauge.before())
    gauge.after(gauge.before())
    assert asked == [[0, 1, 2, 3]] * 2 + [[4, 5, 0, 1]] * 2
    assert CoreGauge().cores == tuple(sorted(os.sched_getaffinity(0))), "by default every core it may use"


def test_a_reading_the_os_refuses_is_no_reading():
    def refused(cores):
        raise OSError(22, "Invalid argument")

    gauge = CoreGauge((0,), read=refused)
    assert gauge.before() is None and gauge.after(None) is None


def test_a_run_is_disturbed_by_other_processes_or_by_slow_cores_and_says_which():
    run = TrialResult(knobs=NEUTRAL_KNOBS, measurement=fake_measurement(100.0))
    slow = CoreSpeed([0, 1], [9.8, 7.0], [7.0, 7.0], [7.0, 7.0])
    assert not run.disturbed and run.disturbance is None
    assert not replace(run, core_speed=CoreSpeed([0, 1], [7.0, 7.0], [7.0, 7.0], [7.0, 7.0])).disturbed
    slowed = replace(run, core_speed=slow)
    assert slowed.disturbed and slowed.disturbance == Disturbance(cores_slowdown=pytest.approx(1.4))
    busy = replace(
        run.measurement, system=replace(run.measurement.system, cpu_total_percent=100.0, process_tree_cores=1.2)
    )
    both = replace(slowed, measurement=busy)
    assert both.disturbance == Disturbance(others_cores=pytest.approx(0.8), cores_slowdown=pytest.approx(1.4))
    assert TrialResult.from_dict(both.to_dict()) == both
    failed = TrialResult(knobs=NEUTRAL_KNOBS, core_speed=slow)
    assert not failed.disturbed, "a failed run has no figures to doubt"


def test_a_tuning_run_reads_the_cores_around_the_runs_where_one_decides_not_the_searchs_and_keeps_them(tmp_path):
    study = {"n_trials": 1, "storage": f"sqlite:///{tmp_path}/s.db"}
    settings = load_settings(tiny_config(study=study, measure={"core_speed": True}), "tiny")
    app.run(settings, tmp_path / "out", out=io.StringIO())
    rows = pandas.read_csv(tmp_path / "out" / "trials.csv").set_index("trial")["cores_slowdown"]
    assert rows["baseline"] > 0 and rows.drop("baseline").isna().all(), rows
    stored = TrialResult.from_dict(json.loads((tmp_path / "out" / "trials" / "baseline.result.json").read_text()))
    # The tuner reads the cores outside the trial (tests/trial/test_runner.py), then writes what it saw into the file.
    assert stored.core_speed is not None and stored.wall_s > 0
    results = load_results(optuna.load_study(study_name="tiny", storage=study["storage"]))
    assert results.baseline.result.core_speed.usual_ms[0] > 0, "stored with the study: reports re-render from it"
